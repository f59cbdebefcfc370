"""KV-cache blocks keyed by chained hashes of their token ids, as vLLM and LMCache key them."""

import hashlib
import struct

import torch


class KVBlockStore:
    """Stores a model's KV-cache blocks in tierpool, ``block_tokens`` tokens per block.

    A block's key hashes its token ids together with the key of the block before it, so a
    block is found only after the same prefix: the cached part of a prompt is a run of
    consecutive keys from the start (``lookup``). Only full blocks are stored. Blocks have
    ``cache`` durability by default: the server may drop them when every tier is full, and a
    dropped block is a miss. Each call is one round trip, however many blocks.

        kv = KVBlockStore(client, "llama-7b", block_tokens=16)
        kv.put_blocks(tokens, blocks)       # blocks[i]: the KV tensor of tokens[16*i:16*i+16]
        hit = kv.lookup(tokens)             # tokens whose KV is stored, from the start
        n = kv.get_blocks(tokens, out)      # fills out[0..n) and returns n
    """

    def __init__(self, client, model_id, block_tokens, *, durability="cache", tier=None):
        if int(block_tokens) <= 0:
            raise ValueError("block_tokens must be positive, not %r" % (block_tokens,))
        self.client = client
        self.model_id = str(model_id)
        self.block_tokens = int(block_tokens)
        self.durability = durability
        self.tier = tier

    def block_keys(self, token_ids):
        """The key of each full block of ``token_ids`` (a sequence of ints or a 1-D tensor)."""
        ids = _token_list(token_ids)
        keys = []
        prev = hashlib.blake2b(self.model_id.encode(), digest_size=16).digest()
        for start in range(0, len(ids) - self.block_tokens + 1, self.block_tokens):
            h = hashlib.blake2b(prev, digest_size=16)
            h.update(struct.pack("<%dq" % self.block_tokens, *ids[start:start + self.block_tokens]))
            prev = h.digest()
            keys.append("kv/%s/%s" % (self.model_id, prev.hex()))
        return keys

    def put_blocks(self, token_ids, blocks):
        """Stores one tensor per full block of ``token_ids`` (a list, or a tensor whose first
        dimension counts blocks); extra tensors beyond the full blocks are an error. Returns the
        number stored; with cache durability a block the server had no room for is skipped."""
        keys = self.block_keys(token_ids)
        blocks = list(blocks.unbind(0)) if torch.is_tensor(blocks) else list(blocks)
        if len(blocks) > len(keys):
            raise ValueError("%d blocks for %d full blocks of tokens" % (len(blocks), len(keys)))
        items = [(k, b.contiguous() if torch.is_tensor(b) else b) for k, b in zip(keys, blocks)]
        errors = self.client.put_batch(items, kind="kv_block", durability=self.durability,
                                       tier=self.tier, strict=False)
        stored = 0
        for e in errors:
            if e is None:
                stored += 1
            elif e.code_name != "RESOURCE_EXHAUSTED":
                raise e
        return stored

    def lookup(self, token_ids):
        """How many tokens of ``token_ids``, from the start, have their blocks stored (a
        multiple of block_tokens)."""
        keys = self.block_keys(token_ids)
        if not keys:
            return 0
        present = self.client._c.contains_batch(keys)
        hit = 0
        for p in present:
            if not p:
                break
            hit += 1
        return hit * self.block_tokens

    def get_blocks(self, token_ids, out):
        """Reads the stored prefix's blocks into ``out`` (preallocated tensors, one per block,
        or a tensor whose first dimension counts blocks). Returns how many blocks were read: the
        run of consecutive hits from the start."""
        keys = self.block_keys(token_ids)
        outs = list(out.unbind(0)) if torch.is_tensor(out) else list(out)
        n = min(len(keys), len(outs))
        results = self.client.get_batch_into(list(zip(keys[:n], outs[:n])), strict=False)
        got = 0
        for r in results:
            if isinstance(r, Exception):
                if r.code_name == "NOT_FOUND":
                    break
                raise r
            got += 1
        return got


def _token_list(token_ids):
    if torch.is_tensor(token_ids):
        if token_ids.dim() != 1:
            raise ValueError("token_ids must be 1-D, not of shape %s" % (tuple(token_ids.shape),))
        return [int(x) for x in token_ids.tolist()]
    return [int(x) for x in token_ids]
