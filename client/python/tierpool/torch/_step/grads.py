"""Gradients of the parameters a job holds, taken into tierpool as autograd accumulates them.

PyTorch 1.13 has no hook that runs after a parameter's gradient is accumulated
(``register_post_accumulate_grad_hook`` is 2.1's); the AccumulateGrad node's own post-hook is
that moment, as DDP used it before. The job keeps those nodes alive: a parameter refers to its
node weakly, and a new node would not carry the hook."""

import functools


class Gradients:
    def __init__(self, job, held):
        self.job = job
        self._nodes = []
        self._handles = []
        for h in held:
            if not h.param.requires_grad:
                continue
            node = h.param.expand_as(h.param).grad_fn.next_functions[0][0]
            self._handles.append(node.register_hook(functools.partial(self._ready, h.index)))
            self._nodes.append(node)

    def _ready(self, index, grad_inputs, grad_outputs):
        self.job.gradient_ready(index)

    def remove(self):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._nodes.clear()
