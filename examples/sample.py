"""Top-k / top-p sampling from logits with a k, a temperature and a top-p of each request, in torch.

A serving batch mixes requests with different sampling settings. One deepselect-rt call gives
every request its own k (``k_per_row``): each row's best k_i logits by descending value, then
fills (``-inf``) in the slots past k_i, so temperature, softmax and the top-p cut run on a small
(batch, max_k) tensor instead of the whole vocabulary. The selection is exact and
deterministic: ties go to the lower token id, on every GPU and batch size.

The check: each sampled token lies in its request's top-k_i by torch.topk (with the same tie
rule, by sorting (-logit, id)), inside its top-p nucleus; greedy requests (temperature 0) take
the argmax; and the selected candidates equal a per-request torch.topk.

Runs on the CPU (torch CPU tensors go to deepselect-rt's NumPy reference backend) or a GPU:
    python examples/sample.py [--device cuda] [--batch 8] [--vocab 32000]
"""

from __future__ import annotations

import argparse

import torch

import deepselect_rt

from arguments import positive_int  # examples/arguments.py, beside this script


def sample(logits, k, temperature, top_p, generator, max_k):
    """One token a row. ``k``: (batch,) int32, 1 <= k_i <= max_k; ``temperature``: (batch,),
    0 for greedy; ``top_p``: (batch,) in (0, 1]. Returns (tokens, candidate ids, their logits)."""
    values, ids = deepselect_rt.topk(logits, max_k, k_per_row=k, indices_type="int64")
    # values: descending per row; slots past k_i hold -inf (never sampled).
    greedy = temperature == 0
    scaled = values.float() / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    probs = torch.softmax(scaled, dim=-1)
    # top-p: keep the shortest prefix whose mass reaches top_p (always the first candidate).
    before = torch.cumsum(probs, dim=-1) - probs
    probs = torch.where(before < top_p[:, None], probs, torch.zeros_like(probs))
    choice = torch.multinomial(probs, 1, generator=generator)[:, 0]
    choice = torch.where(greedy, torch.zeros_like(choice), choice)  # slot 0 is the argmax
    tokens = ids.gather(1, choice[:, None])[:, 0]
    return tokens, ids, values


def check(logits, k, temperature, top_p, tokens, ids, values) -> None:
    batch, vocab = logits.shape
    for b in range(batch):
        kb = int(k[b])
        row = logits[b].float().cpu()
        # torch.topk's order among equal logits is unspecified: sort by (-logit, id) instead.
        order = sorted(range(vocab), key=lambda t: (-row[t].item(), t))[:kb]
        assert ids[b, :kb].tolist() == order, f"request {b}: candidates differ from its top-{kb}"
        assert torch.isneginf(values[b, kb:]).all(), f"request {b}: slots past k are not fills"
        token = int(tokens[b])
        assert token in order, f"request {b}: token {token} outside its top-{kb}"
        if temperature[b] == 0:
            assert token == order[0], f"request {b}: greedy took {token}, not the argmax {order[0]}"
        else:
            p = torch.softmax(row[order] / temperature[b].cpu(), dim=0)
            rank = order.index(token)
            assert (torch.cumsum(p, 0) - p)[rank] < top_p[b].cpu(), f"request {b}: token outside the top-p"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=positive_int, default=8)
    parser.add_argument("--vocab", type=positive_int, default=32000)
    parser.add_argument("--max-k", type=positive_int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.max_k > args.vocab:  # a k_i above the vocabulary leaves fills among the candidates
        parser.error(f"argument --max-k: expected at most --vocab ({args.vocab}), got {args.max_k}")
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    logits = (torch.randn(args.batch, args.vocab, generator=gen) * 3).to(torch.bfloat16).to(device)
    k = torch.randint(1, args.max_k + 1, (args.batch,), generator=gen, dtype=torch.int32)
    temperature = torch.rand(args.batch, generator=gen) + 0.3
    temperature[0] = 0.0  # a greedy request
    top_p = torch.rand(args.batch, generator=gen) * 0.7 + 0.3
    k, temperature, top_p = k.to(device), temperature.to(device), top_p.to(device)
    sample_gen = torch.Generator(device=device).manual_seed(args.seed)
    tokens, ids, values = sample(logits, k, temperature, top_p, sample_gen, args.max_k)
    check(logits, k, temperature, top_p, tokens, ids, values)
    # Deterministic: the same call selects the same candidates, bit for bit.
    again = deepselect_rt.topk(logits, args.max_k, k_per_row=k)
    assert torch.equal(again[1], ids) and torch.equal(again[0].view(torch.int16), values.view(torch.int16))
    print(f"sample ok on {args.device}: {args.batch} requests over {args.vocab} tokens, k per request "
          f"{k.tolist()}, tokens {tokens.tolist()}")


if __name__ == "__main__":
    main()
