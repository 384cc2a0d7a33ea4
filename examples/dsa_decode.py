"""One decode step of DeepSeek sparse attention (DSA) on a paged KV cache, in torch.

Each request attends only to the ``topk`` cached tokens that a small "lightning indexer" scores
highest. The cache is paged (as in vLLM or SGLang): a pool of ``page_size``-token pages, and a
block table mapping each request's logical pages to pool pages. deepselect-rt selects the
top-k per request and, through the page-table transform, returns the selected tokens' slots in
the pool directly (``page_table=``), plus their logical positions (``return_raw_indices=True``).

The step:
  1. indexer: scores[b, t] = sum_h w[b, h] * relu(q_idx[b, h] . k_idx[t]) over each request's
     cached tokens t (k_idx read from the paged indexer-key cache);
  2. top-k of each row of scores within the request's length, mapped to pool slots;
  3. gather the selected keys and values from the pool, attend over them (fills masked);
  4. check: dense attention over the request's whole cache, masked to the same logical
     positions, gives the same output; and the ragged form of the scores (``ragged_topk``) picks
     the same tokens.

Runs on the CPU (torch CPU tensors go to deepselect-rt's NumPy reference backend) or a GPU:
    python examples/dsa_decode.py [--device cuda] [--batch 4] [--topk 64]
"""

from __future__ import annotations

import argparse
import math

import torch

import deepselect_rt

from arguments import positive_int  # examples/arguments.py, beside this script


def build_cache(lengths, page_size, dim, idx_dim, generator, device):
    """A shuffled page pool holding every request's keys, values and indexer keys, and the block
    table (batch, max_pages) int32 mapping logical page j of request b to its pool page."""
    pages_per = [-(-n // page_size) for n in lengths]
    max_pages = max(pages_per)
    pool_pages = sum(pages_per) + 3  # a few unused pages
    order = torch.randperm(pool_pages, generator=generator).tolist()
    table = torch.full((len(lengths), max_pages), -1, dtype=torch.int32)
    used = 0
    for b, n in enumerate(pages_per):
        table[b, :n] = torch.tensor(order[used:used + n], dtype=torch.int32)
        used += n
    slots = pool_pages * page_size
    k_cache = torch.randn(slots, dim, generator=generator)
    v_cache = torch.randn(slots, dim, generator=generator)
    idx_k_cache = torch.randn(slots, idx_dim, generator=generator)
    return [t.to(device) for t in (table, k_cache, v_cache, idx_k_cache)]


def logical_slots(table, lengths, page_size):
    """(batch, max_len) pool slot of each request's logical position (-1 past its length)."""
    max_len = max(lengths)
    pos = torch.arange(max_len, device=table.device)
    slots = table[:, pos // page_size].long() * page_size + pos % page_size
    valid = pos[None, :] < torch.tensor(lengths, device=table.device)[:, None]
    return torch.where(valid, slots, torch.full_like(slots, -1))


def indexer_scores(hidden, wq_idx, w_weights, idx_k_cache, slots, heads):
    """The lightning indexer's scores, (batch, max_len) float32, -inf past each length."""
    batch = hidden.shape[0]
    q_idx = (hidden @ wq_idx).view(batch, heads, -1)                   # (B, H, d_idx)
    weights = hidden @ w_weights                                       # (B, H)
    keys = idx_k_cache[slots.clamp(min=0)]                             # (B, L, d_idx)
    per_head = torch.relu(torch.einsum("bhd,bld->bhl", q_idx, keys))   # (B, H, L)
    scores = torch.einsum("bh,bhl->bl", weights, per_head)
    return scores.masked_fill(slots < 0, -math.inf).float()


def sparse_attention(q, k_cache, v_cache, slot_idx, fill):
    """Attention of each request's query heads over its selected pool slots (fills masked)."""
    valid = slot_idx != fill
    safe = torch.where(valid, slot_idx, torch.zeros_like(slot_idx)).long()
    keys, values = k_cache[safe], v_cache[safe]                        # (B, K, d)
    logits = torch.einsum("bhd,bkd->bhk", q, keys) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~valid[:, None, :], -math.inf)
    return torch.einsum("bhk,bkd->bhd", torch.softmax(logits, dim=-1), values)


def dense_masked_attention(q, k_cache, v_cache, slots, positions, fill):
    """Attention over each request's whole cache, masked to the logical ``positions``."""
    keys, values = k_cache[slots.clamp(min=0)], v_cache[slots.clamp(min=0)]   # (B, L, d)
    keep = torch.zeros(slots.shape, dtype=torch.bool, device=slots.device)
    rows = torch.arange(slots.shape[0], device=slots.device)[:, None].expand_as(positions)
    chosen = positions != fill
    keep[rows[chosen], positions[chosen].long()] = True
    logits = torch.einsum("bhd,bld->bhl", q, keys) / math.sqrt(q.shape[-1])
    logits = logits.masked_fill(~keep[:, None, :], -math.inf)
    return torch.einsum("bhl,bld->bhd", torch.softmax(logits, dim=-1), values)


def decode_step(args) -> float:
    device = torch.device(args.device)
    gen = torch.Generator().manual_seed(args.seed)
    # Lengths from topk / 2 up (from any length when max_len is shorter), the longest max_len.
    shortest = min(args.topk // 2, args.max_len)
    lengths = [int(n) for n in torch.randint(shortest, args.max_len + 1, (args.batch,), generator=gen)]
    lengths[0] = args.max_len
    d_model, dim, idx_dim, heads, idx_heads = 64, 32, 16, 4, 4
    table, k_cache, v_cache, idx_k_cache = build_cache(lengths, args.page_size, dim, idx_dim, gen, device)
    hidden = torch.randn(args.batch, d_model, generator=gen).to(device)
    wq = (torch.randn(d_model, heads * dim, generator=gen) / math.sqrt(d_model)).to(device)
    wq_idx = (torch.randn(d_model, idx_heads * idx_dim, generator=gen) / math.sqrt(d_model)).to(device)
    w_weights = (torch.randn(d_model, idx_heads, generator=gen) / math.sqrt(d_model)).to(device)
    q = (hidden @ wq).view(args.batch, heads, dim)

    # 1. indexer scores over each request's logical positions.
    slots = logical_slots(table, lengths, args.page_size)
    scores = indexer_scores(hidden, wq_idx, w_weights, idx_k_cache, slots, idx_heads)
    seq_lens = torch.tensor(lengths, dtype=torch.int32, device=device)

    # 2. top-k within each request's length, straight to pool slots; raw = logical positions.
    fill = -1
    _, slot_idx, positions = deepselect_rt.topk(
        scores, args.topk, end=seq_lens, indices_type="int32", idx_oob_fill_value=fill, return_value=False,
        page_table=table, page_size=args.page_size, return_raw_indices=True)

    # The transform is the block table's own mapping of the logical positions.
    chosen = positions != fill
    rows = torch.arange(args.batch, device=device)[:, None].expand_as(positions)
    assert torch.equal(slot_idx[chosen].long(), slots[rows[chosen], positions[chosen].long()])
    assert torch.equal(chosen, torch.arange(args.topk, device=device)[None, :] < seq_lens[:, None].clamp(max=args.topk))

    # 3. sparse attention over the selected entries; 4. the dense reference.
    out = sparse_attention(q, k_cache, v_cache, slot_idx, fill)
    want = dense_masked_attention(q, k_cache, v_cache, slots, positions, fill)
    err = (out - want).abs().max().item()
    assert err < 1e-4, f"sparse and masked dense attention differ by {err}"

    # The same scores packed back to back (ragged rows) select the same tokens.
    cu = torch.zeros(args.batch + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(seq_lens, 0)
    flat = torch.cat([scores[b, :n] for b, n in enumerate(lengths)])
    _, ragged_slots = deepselect_rt.ragged_topk(flat, cu, args.topk, indices_type="int32", idx_oob_fill_value=fill,
                                                return_value=False, page_table=table, page_size=args.page_size)
    assert torch.equal(ragged_slots, slot_idx)
    return err


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=positive_int, default=4)
    parser.add_argument("--max-len", type=positive_int, default=700)
    parser.add_argument("--page-size", type=positive_int, default=16)
    parser.add_argument("--topk", type=positive_int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    err = decode_step(args)
    print(f"dsa_decode ok on {args.device}: batch {args.batch}, top-{args.topk} of up to {args.max_len} cached "
          f"tokens in pages of {args.page_size}; max |sparse - masked dense| = {err:.2e}")


if __name__ == "__main__":
    main()
