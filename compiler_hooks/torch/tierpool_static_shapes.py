"""repeat_interleave with a whole-number count, traced as the expand and reshape it is.

Grouped-query attention repeats each key/value head (`k.repeat_interleave(groups, dim=1)`).
PyTorch 1.13 (Debian's) runs an int count through `aten.repeat_interleave.Tensor`, whose output
size depends on the values of the counts tensor it makes, so tracing on fake tensors stops there
(`DynamicOutputShapeException`). With a whole-number count the output's shape is known: each
slice along `dim` repeated `repeats` times in place, which is `unsqueeze(dim + 1)`, an `expand`
of that new axis and a `reshape` that folds it in, the same values in the same order.
`static_repeats()` is a context for tracing that routes such calls there; counts given as a
tensor (one per slice) take PyTorch's own path.
"""
import contextlib


def repeat_interleave(torch, original, x, repeats, dim=None, output_size=None):
    if isinstance(repeats, bool) or not isinstance(repeats, int) or \
            not isinstance(x, torch.Tensor) or repeats < 0:
        if dim is None:
            return original(x, repeats, output_size=output_size)
        return original(x, repeats, dim, output_size=output_size)
    if dim is None:
        x, dim = x.reshape(-1), 0
    if x.dim() == 0:
        x = x.reshape(1)
    dim = dim % x.dim()
    shape = list(x.shape)
    expanded = shape[:dim + 1] + [repeats] + shape[dim + 1:]
    folded = shape[:dim] + [shape[dim] * repeats] + shape[dim + 1:]
    return x.unsqueeze(dim + 1).expand(expanded).reshape(folded)


@contextlib.contextmanager
def static_repeats():
    import torch
    tensor_method, function = torch.Tensor.repeat_interleave, torch.repeat_interleave

    def as_method(self, repeats, dim=None, *, output_size=None):
        return repeat_interleave(torch, tensor_method, self, repeats, dim, output_size)

    def as_function(x, repeats=None, dim=None, *, output_size=None):
        if repeats is None:  # torch.repeat_interleave(counts): indices, PyTorch's own
            return function(x) if output_size is None else function(x, output_size=output_size)
        return repeat_interleave(torch, function, x, repeats, dim, output_size)

    torch.Tensor.repeat_interleave, torch.repeat_interleave = as_method, as_function
    try:
        yield
    finally:
        torch.Tensor.repeat_interleave, torch.repeat_interleave = tensor_method, function
