"""Top-k sampling from a vocab-parallel LM head with deepselect_rt.distributed.topk.

    torchrun --nproc-per-node 2 examples/vocab_parallel_sampling.py [--vocab 129280 --k 50]

One process a GPU with NCCL where CUDA is available, else gloo on the CPU.

Each rank holds a slice of the LM head's rows, as a vocab-parallel (tensor-parallel) head does,
and computes the logits of its slice of the vocabulary only. ``distributed.topk`` gives every
rank the exact top-k over the whole vocabulary by exchanging k candidates a rank, not the
logits; every rank then samples the same token from it (the same seeded generator). The script
checks each step against the gathered computation: all-gather the logits, ``deepselect_rt.topk``
of the whole rows, the same sampling; the top-k must agree bit for bit and the tokens exactly.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

import deepselect_rt
from deepselect_rt import distributed

from arguments import positive_float, positive_int  # examples/arguments.py, beside this script


def vocab_bounds(vocab: int, world: int) -> list[int]:
    """Shard boundaries of a vocabulary split as evenly as possible (the first ranks take one
    more token when it does not divide): rank r holds tokens [bounds[r], bounds[r + 1])."""
    base, extra = divmod(vocab, world)
    bounds = [0]
    for r in range(world):
        bounds.append(bounds[-1] + base + (r < extra))
    return bounds


def sample(values: torch.Tensor, indices: torch.Tensor, temperature: float, seed: int) -> torch.Tensor:
    """One token a row from the top-k: softmax of values / temperature, then a draw."""
    gen = torch.Generator(device=values.device).manual_seed(seed)
    probs = torch.softmax(values.float() / temperature, dim=-1)
    return indices.gather(1, torch.multinomial(probs, 1, generator=gen)).squeeze(1)


def gathered_logits(local: torch.Tensor, bounds: list[int]) -> torch.Tensor:
    """The whole rows of logits, for the check: every shard padded to the widest, all-gathered."""
    widest = max(b - a for a, b in zip(bounds, bounds[1:]))
    padded = torch.nn.functional.pad(local, (0, widest - local.shape[1]))
    parts = [torch.empty_like(padded) for _ in range(len(bounds) - 1)]
    dist.all_gather(parts, padded)
    return torch.cat([p[:, :b - a] for p, a, b in zip(parts, bounds, bounds[1:])], dim=1)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(bits), b.view(bits))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=positive_int, default=32003,
                        help="vocabulary size (any, need not divide evenly)")
    parser.add_argument("--hidden", type=positive_int, default=256, help="hidden size")
    parser.add_argument("--rows", type=positive_int, default=4, help="sequences decoded together (the batch)")
    parser.add_argument("--k", type=positive_int, default=50, help="top-k of the sampler")
    parser.add_argument("--steps", type=positive_int, default=3, help="decode steps")
    parser.add_argument("--temperature", type=positive_float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    bounds = vocab_bounds(args.vocab, world)
    start, stop = bounds[rank], bounds[rank + 1]

    # Every rank makes the same head from the seed and keeps its rows; a real model loads its slice.
    gen = torch.Generator().manual_seed(args.seed)
    head = (torch.randn(args.vocab, args.hidden, generator=gen) / args.hidden**0.5)[start:stop].to(device)

    for step in range(args.steps):
        # The last hidden states are replicated over the tensor-parallel ranks.
        hidden = torch.randn(args.rows, args.hidden, generator=gen).to(device)
        logits = hidden @ head.T  # (rows, stop - start) float32: this rank's slice of the vocabulary

        # width_offsets: the split is known, so the call exchanges the candidates only.
        values, indices = distributed.topk(logits, args.k, width_offsets=bounds, sorted=True)
        tokens = sample(values, indices, args.temperature, seed=args.seed * 1000 + step)

        # The check: the whole rows, gathered, give the same top-k and the same tokens.
        full = gathered_logits(logits, bounds)
        want_values, want_indices = deepselect_rt.topk(full, args.k, sorted=True)
        want_tokens = sample(want_values, want_indices, args.temperature, seed=args.seed * 1000 + step)
        if not (same_bits(values, want_values) and torch.equal(indices, want_indices)
                and torch.equal(tokens, want_tokens)):
            raise SystemExit(f"rank {rank}, step {step}: the distributed top-k differs from the gathered one")
        if rank == 0:
            print(f"step {step}: tokens {tokens.tolist()}")

    if rank == 0:
        topk_bytes = args.rows * args.k * world * (values.element_size() + indices.element_size())
        gather_bytes = args.rows * args.vocab * logits.element_size()
        print(f"top-{args.k} of a {args.vocab}-token vocabulary over {world} ranks ({device.type}) matches the "
              f"gathered computation on every step; each rank gathers {topk_bytes:,} bytes a step (candidates) "
              f"instead of {gather_bytes:,} (logits)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
