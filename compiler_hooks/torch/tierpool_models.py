"""Small model factories for `tierpool schedule from-torch --model tierpool_models:NAME`."""
import torch


def transformer_stack(layers=12, d_model=768, heads=12, ffn=3072):
    """A stack of torch.nn.TransformerEncoderLayer (BERT-base sized by default); input BxSxD."""
    return torch.nn.Sequential(*[
        torch.nn.TransformerEncoderLayer(d_model, heads, ffn, dropout=0.0, batch_first=True)
        for _ in range(layers)])


def mlp(width=256, depth=4):
    """A small MLP for tests; input Bx width."""
    mods = []
    for _ in range(depth):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)
