"""tierpool.torch.offload: a whole training step carried out by its plan.

The first step runs as plain PyTorch and is recorded (recording.py): the module calls, what
autograd saves and reads back, the gradients, each parameter's update, with their times. It is
planned under the budget, the plan registered, and the parameters and optimizer states moved
into tierpool. From the second step on, every tensor the plan names lives in tierpool, its
storage a view of its hbm copy while a step reads it; each event of the step (recorded ones,
met again in the same order) reports the job's progress, so that the server's executor moves
the tensors as the plan says.

Locking: none. A job belongs to the thread that trains; its hooks run on that thread (CPU
autograd runs backward on the caller's thread).
"""

import gc
import itertools
import os
import shutil
import tempfile
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from ... import _errors
from .. import _device
from . import memory, planning, views
from .grads import Gradients
from .params import HeldParam, Params
from .recording import BACKWARD, FORWARD, Recording
from .remakes import Remakes, parse_share
from .report import StepReport
from .saved import SavedTensors
from .state import StateDicts
from .updates import Updates

WAITING, RECORDING, PLANNED, CLOSED = "waiting", "recording", "planned", "closed"
_jobs = itertools.count()


def _parse_budget(budget):
    if isinstance(budget, str) and budget.strip().endswith("%"):
        f = float(budget.strip()[:-1]) / 100
        if not 0 < f <= 1:
            raise _errors.InvalidArgument("budget %r: a share of the peak in (0%%, 100%%]"
                                          % budget, 1)
        return f, None
    if isinstance(budget, float) and 0 < budget <= 1:
        return budget, None
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        return None, budget
    raise _errors.InvalidArgument(
        "budget %r: a share of the no-offload peak (\"60%%\" or 0.6) or bytes (an int)"
        % (budget,), 1)


class _ParamReads(TorchDispatchMode):
    """While the first step's forward runs: which held parameters each op reads (a view of one
    too), by address, and, where the job may recompute, what each op made (recipes.py)."""

    def __init__(self, job):
        super().__init__()
        self.job = job
        spans = sorted((h.param.data_ptr(), h.param.data_ptr() + max(h.nbytes, 1), h.index)
                       for h in job.params.held)
        self.starts = [s[0] for s in spans]
        self.spans = spans

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat, _ = tree_flatten((args, kwargs or {}))
        for a in flat:
            if isinstance(a, torch.Tensor) and a.device.type != "meta":
                i = self.job.param_at(a.data_ptr(), self.starts, self.spans)
                if i is not None:
                    self.job.rec.use_param(i, self.job.module_now())
        producers = self.job.remakes.producers
        if producers is not None:
            return producers.run(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


class OffloadJob:
    """A training job whose parameters, gradients, optimizer states and saved activations live
    in tierpool and move by a plan (``tierpool.torch.offload``)."""

    def __init__(self, model, optimizer, client, budget, *, device=None, min_bytes=64 << 10,
                 prefix=None, name=None, keep_objects=False, at_least_floor=False,
                 workdir=None, on_step=None, recompute=0):
        if not isinstance(model, torch.nn.Module):
            raise _errors.InvalidArgument("model must be a torch.nn.Module", 1)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise _errors.InvalidArgument("optimizer must be a torch.optim.Optimizer", 1)
        devices = {p.device.type for p in model.parameters()}
        if devices - {"cpu"}:
            raise _errors.FailedPrecondition(
                "tierpool.torch.offload holds a model on the CPU (the server's hbm stands in "
                "for a GPU's); this model has parameters on %s" % ", ".join(sorted(devices)), 5)
        self.client = client
        self.model = model
        self.optimizer = optimizer
        self.fraction, self.budget_bytes = _parse_budget(budget)
        self.device = device
        self.min_bytes = int(min_bytes)
        self.prefix = prefix or "offload/%d.%d" % (os.getpid(), next(_jobs))
        self.name = name or type(model).__name__
        self.keep_objects = keep_objects
        self.at_least_floor = at_least_floor
        # A directory of the job's own goes when the job closes; one the caller gave stays.
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix="tierpool-offload-")
        self.on_step = on_step
        self.recompute = parse_share(recompute)

        held = []
        for pname, p in model.named_parameters():  # shared parameters once
            if views.nbytes(p) >= self.min_bytes:
                held.append(HeldParam(len(held), pname, p, "%s/w/%s" % (self.prefix, pname)))
        self.params = Params(self, held)
        self.saved = SavedTensors(self, self.min_bytes)
        self.remakes = Remakes(self, self.recompute)
        self.grads = Gradients(self, held)
        self.modules = list(model.modules())
        self._module_index = {id(m): i for i, m in enumerate(self.modules)}
        names = {id(m): n for n, m in model.named_modules()}
        self._module_names = [names.get(id(m)) or "model" for m in self.modules]
        self._hooks = []
        for m in self.modules:
            self._hooks.append(m.register_forward_pre_hook(self._enter))
            self._hooks.append(m.register_forward_hook(self._exit))
        self._forward = model.forward
        model.forward = self._wrapped_forward
        self.updates = Updates(self, optimizer, self.min_bytes)
        self.state_dicts = StateDicts(self, self.modules, optimizer)

        self.mode = WAITING
        self._hooks_pushed = False
        self.rec = None
        self.layout = None
        self.plan = None
        self.reports = []
        self.report = None
        self.no_offload_peak = self.budget = self.hbm_budget = self.outside_recorded = 0
        self.floor = (0, 0)
        self._stack = []  # module indexes while recording forward
        self._grads = set()  # param indexes with a gradient in tierpool this iteration
        self._reads = {}  # key -> tensor: the step's reads, fetched as it started
        self._eval_of = {}  # module index -> the parameters it reads outside a training step
        self._unplanned = itertools.count()
        self._outside = memory.OutsideMemory()
        self._total = memory.OutsideMemory()
        self._new_iteration()
        self._iteration = 0
        self._last = None  # the server's job counters at the last report

    # ---- events ----

    def _new_iteration(self):
        self._ev = 0
        self._step = None
        self._diverged = ""
        self._below = 0
        self._unplanned_now = 0
        self._grads.clear()
        self._t0 = None
        self._outside_iter = 0
        self.remakes.new_iteration()
        self.saved.new_iteration()

    # ---- what collaborators ask ----

    def stepping(self):
        """Whether optimizer.step() is a step of the job (recorded or planned)."""
        return self.mode in (RECORDING, PLANNED)

    def recording(self):
        return self.mode == RECORDING

    def holding(self):
        """Whether the held tensors are in tierpool (between steps: placeholders in place)."""
        return self.mode == PLANNED

    def has_gradient(self, index):
        return self.mode == PLANNED and index in self._grads

    def gradient_used(self, index, key):
        """The update read parameter ``index``'s gradient: it is dead."""
        self.saved.garbage.append(key)
        self._grads.discard(index)

    def note_held(self, nbytes):
        """While recording: ``nbytes`` more are held (an optimizer state made)."""
        self._held_rec += nbytes
        self.held_changed()

    def _training(self):
        """A training forward: gradients on and the model in training mode. Anything else
        (evaluation) is no step of the plan: each module reads its parameters as it runs."""
        return torch.is_grad_enabled() and self.model.training

    def _eval_params(self, m):
        """What module ``m`` reads outside a training step: what it read in the recorded one,
        and its own parameters (a module the training step never called)."""
        got = self._eval_of.get(m)
        if got is None:
            own = [self.params.index_of(p) for p in self.modules[m].parameters(recurse=False)]
            got = self._eval_of[m] = sorted(set(self.layout.module_params.get(m, ())) |
                                            {i for i in own if i is not None})
        return got

    def _enter(self, module, inputs):
        m = self._module_index[id(module)]
        if not self._training():
            if self.mode == PLANNED:
                self.params.enter_module(self._eval_params(m))
            return
        if self.mode == WAITING and module is self.model:
            self._begin_recording()
        if module is self.model and self.mode in (RECORDING, PLANNED):
            self._push_hooks()
        if self.mode == RECORDING:
            self._stack.append(m)
            self.close_interval()
            self.rec.event("enter", m, self._module_names[m], FORWARD, time.perf_counter())
        elif self.mode == PLANNED:
            self.event(("enter", m))

    def _exit(self, module, inputs, output):
        m = self._module_index[id(module)]
        if not self._training():
            if self.mode == PLANNED:
                self.params.exit_module(self._eval_params(m))
            return
        if self.mode == RECORDING:
            if self._stack and self._stack[-1] == m:
                self._stack.pop()
            self.close_interval()
            self.rec.event("exit", m, self._module_names[m] + "/end", FORWARD,
                           time.perf_counter())
        elif self.mode == PLANNED:
            self.event(("exit", m))

    def _wrapped_forward(self, *args, **kwargs):
        if not self._training() or self.mode != RECORDING:
            return self._forward(*args, **kwargs)
        with _ParamReads(self):
            return self._forward(*args, **kwargs)

    def _push_hooks(self):
        """The job's saved-tensor hooks, from the model's forward to the optimizer's step: the
        loss computed from the model's output (a language model's log-softmax over its logits)
        is saved through them too. Pushed and popped on the thread that trains."""
        if not self._hooks_pushed:
            torch._C._autograd._push_saved_tensors_default_hooks(self.saved.pack,
                                                                 self.saved.unpack)
            self._hooks_pushed = True

    def pop_hooks(self):
        if self._hooks_pushed:
            self._hooks_pushed = False
            torch._C._autograd._pop_saved_tensors_default_hooks()

    def event(self, ev):
        """An event of a planned step: the step it starts, if it starts one."""
        i = self._ev
        self._ev += 1
        if self._t0 is None:
            self._t0 = time.perf_counter()
        if self._diverged:
            return
        events = self.layout.events
        if i >= len(events) or events[i] != ev:
            self._diverge("event %d is %s, the recorded step had %s there"
                          % (i, self._describe(ev),
                             self._describe(events[i]) if i < len(events) else "nothing"))
            return
        s = self.layout.event_step[i]
        if s != self._step:
            self._enter_step(s)

    def _describe(self, ev):
        kind, ident = ev
        if kind in ("enter", "exit"):
            return "%s of %s" % (kind, self._module_names[ident])
        if kind == "update":
            return "the update of %s" % self.params.held[ident].name
        return "the first read of saved tensor %d" % ident

    def _enter_step(self, s):
        self._reads.clear()
        self._collect()
        _, phase, _ = self.layout.steps[s]
        keep = self.layout.step_params[s] if phase == FORWARD else ()
        self.params.release(keep)
        outside = max(self._outside.take_peak(), 0)  # the step that ends
        self._outside_iter = max(self._outside_iter, outside)
        self.plan.report_progress(self._iteration, s, outside)
        self._step = s
        if keep:
            self.params.materialize(keep)
        if phase == BACKWARD:
            self._fetch_reads(s)
        self.remakes.make_at(s)

    def _diverge(self, why):
        """The step left the recorded one: its tensors are stored under keys of their own and
        every parameter is read in for the rest of it; no more progress is reported."""
        self._diverged = why
        self._reads.clear()
        self.params.materialize([h.index for h in self.params.held])

    # ---- recording ----

    def _begin_recording(self):
        self.mode = RECORDING
        params = [(h.name, h.nbytes, views.dtype_name(h.dtype), h.shape) for h in self.params.held]
        self.rec = Recording(self.prefix, params)
        self.remakes.start_recording()
        self._stack = []
        gc.collect()
        held = sum(h.nbytes for h in self.params.held)
        for p in self.params.held:  # gradients and states that exist already
            if p.param.grad is not None:
                held += views.nbytes(p.param.grad)
            held += sum(views.nbytes(t) for t in self.optimizer.state.get(p.param, {}).values()
                        if torch.is_tensor(t) and views.nbytes(t) >= self.min_bytes)
        self._base0 = memory.host_bytes_in_use() - held
        self._held_rec = held
        self._total.offset = self._base0
        self._outside.offset = self._base0 + held
        self._total.take_peak()
        self._outside.take_peak()

    def held_changed(self):
        if self.mode == RECORDING:
            self._outside.offset = self._base0 + self._held_rec + self.saved.held_bytes

    def close_interval(self, unaccounted=0):
        """The recorded interval ends: the most held outside tierpool during it (less
        ``unaccounted``: tensors counted as held only once it ended), and the step's peak."""
        self.rec.note_outside(self._outside.take_peak() - unaccounted)
        self._total.sample()

    def module_now(self):
        return self._stack[-1] if self._stack else None

    @staticmethod
    def param_at(ptr, starts, spans):
        import bisect
        k = bisect.bisect_right(starts, ptr) - 1
        if k >= 0 and spans[k][0] <= ptr < spans[k][1]:
            return spans[k][2]
        return None

    # ---- saved tensors (saved.py calls these) ----

    def store_activation(self, ref, stored, t):
        """Stores a saved activation (``t`` as autograd saved it, ``stored`` in its dense
        order); returns (its key, the tensor kept instead, if any). One the plan recomputes is
        not stored unless a step before its recompute reads it: (None, None)."""
        if self.mode == RECORDING:
            label = self._module_names[self.module_now()] if self._stack else "model"
            seq = self.rec.pack(ref.nbytes, views.dtype_name(ref.dtype), ref.shape, label)
            assert seq == ref.seq
            self.remakes.note_saved(t, seq)
            return None, stored
        key, planned = self._activation_key(ref)
        if planned and self.remakes.arm(ref):
            return None, None
        self.client.put(key, stored, kind="activation", tier="hbm" if planned else None)
        return key, None

    def _activation_key(self, ref):
        packs = self.layout.packs
        if not self._diverged:
            exp = packs[ref.seq] if ref.seq < len(packs) else None
            if (exp is not None and exp.tensor is not None and exp.nbytes == ref.nbytes and
                    exp.dtype == views.dtype_name(ref.dtype) and exp.shape == ref.shape):
                key = self.layout.key(exp.tensor)
                if not self.saved.key_in_use(key):
                    return key, True
            else:
                self._diverge("saved tensor %d is %s %s, the recorded step saved %s there"
                              % (ref.seq, views.dtype_name(ref.dtype), list(ref.shape),
                                 "nothing" if exp is None else
                                 "parameter %s" % self.params.held[exp.param].name
                                 if exp.tensor is None else "%s %s" % (exp.dtype,
                                                                       list(exp.shape))))
        self._unplanned_now += 1
        return "%s/u/%d" % (self.prefix, next(self._unplanned)), False

    def note_param_saved(self, ref, t):
        if self.mode == RECORDING:
            label = self._module_names[self.module_now()] if self._stack else "model"
            seq = self.rec.pack(views.nbytes(t), views.dtype_name(t.dtype), t.shape, label,
                                param=ref.param)
            assert seq == ref.seq
        elif self.mode == PLANNED and not self._diverged:
            packs = self.layout.packs
            exp = packs[ref.seq] if ref.seq < len(packs) else None
            if exp is None or exp.param != ref.param:
                self._diverge("saved tensor %d is parameter %s, the recorded step saved "
                              "something else there" % (ref.seq,
                                                        self.params.held[ref.param].name))

    def first_read(self, ref):
        if self.mode == RECORDING:
            self._stack.clear()
            self.close_interval()
            self.rec.unpack(ref.seq, time.perf_counter())
        elif self.mode == PLANNED:
            self.event(("unpack", ref.seq))

    def read_param(self, index):
        h = self.params.held[index]
        if self.mode == RECORDING:
            return h.param.data
        return self.read_view(h.key, h.dtype, h.shape)

    def read_view(self, key, dtype, shape):
        """The tensor over ``key``'s copy: the one the step fetched as it started, else read."""
        t = self._reads.get(key)
        if t is None:
            t = self.read_views([key], [(dtype, shape)])[0]
        return t

    def read_activation(self, ref):
        made = self.remakes.make_unmade(ref)
        if made is not None:
            return made
        t = self._reads.pop(ref.key, None)
        if t is None:
            t = self.read_views([ref.key], [(ref.dtype, ref.shape)])[0]
        return t

    def _fetch_reads(self, s):
        keys, metas = [], []
        for seq in self.layout.step_reads[s]:
            p = self.layout.packs[seq]
            if p.tensor is not None:
                key, meta = self.layout.read_key(seq, s), (getattr(torch, p.dtype), p.shape)
            else:
                h = self.params.held[p.param]
                key, meta = h.key, (h.dtype, h.shape)
            if key not in keys:
                keys.append(key)
                metas.append(meta)
        found = self.client.views(keys, tier=self.step_tier(), strict=False)
        for key, mv, (dtype, shape) in zip(keys, found, metas):
            if not isinstance(mv, Exception):
                self._reads[key] = self._tensor_of(mv, dtype, shape)

    def read_views(self, keys, metas):
        """Tensors over the hbm copies of ``keys`` (one round trip); where the server could give
        only a copy below hbm, a copy of it in the trainer's memory (counted)."""
        return [self._tensor_of(mv, dtype, shape)
                for mv, (dtype, shape) in zip(self.client.views(keys, tier=self.step_tier()),
                                              metas)]

    def step_tier(self):
        """Where a step's reads and writes ask for their copies: hbm while the step follows the
        plan. A step that left it asks for none: the executor no longer frees room as it goes,
        and much of the budget may be the job's own pinned reads, which a wait for room in hbm
        would wait on until it timed out (seconds per read)."""
        return None if self._diverged else "hbm"

    def _tensor_of(self, mv, dtype, shape):
        if views.in_hbm(mv):
            return views.over_view(mv, dtype, shape)
        self._below += 1
        t = torch.empty(shape, dtype=dtype)
        _device.host_bytes_into(mv, t)
        mv.release()
        return t

    def _collect(self):
        keys = self.saved.take_garbage()
        if keys:
            self.client.delete_batch(keys)

    # ---- gradients ----

    def gradient_ready(self, index):
        h = self.params.held[index]
        g = h.param.grad
        if g is None or self.mode not in (RECORDING, PLANNED):
            return
        if self.mode == RECORDING:
            first = index not in self.rec.grad_tensor
            self.rec.grad(index, views.nbytes(g), views.dtype_name(g.dtype), g.shape)
            if first:
                self._held_rec += views.nbytes(g)
                self.held_changed()
            return
        key, planned = self.grad_key(index)
        if index in self._grads:
            old = self.read_views([key], [(g.dtype, tuple(g.shape))])[0]
            g = old + g
            del old
        self.client.put(key, g.contiguous(), tier="hbm" if planned else None)
        self._grads.add(index)
        h.param.grad = None

    def grad_key(self, index):
        tid = self.layout.grad_tensor.get(index)
        if tid is not None and not self._diverged:
            return self.layout.key(tid), True
        return "%s/g/%s" % (self.prefix, self.params.held[index].name), False

    def end_iteration(self):
        if self.mode == RECORDING:
            self.close_interval()
            self.rec.end(time.perf_counter())
            try:
                self._finish_recording()
            except BaseException:
                self.close()
                raise
        else:
            self._collect()
            self.params.release()
            self._reads.clear()
            self._make_report()
            self._iteration += 1
        self._new_iteration()

    # ---- from the recorded step to the plan ----

    def _finish_recording(self):
        self.remakes.stop_recording()
        layout = self.rec.build(self.name)
        self.no_offload_peak = max(self._total.take_peak(), 1)
        self.outside_recorded, self.outside_where = self.rec.outside_peak()
        self.outside_recorded = max(self.outside_recorded, 0)
        budget = (int(self.fraction * self.no_offload_peak) if self.fraction is not None
                  else self.budget_bytes)
        hbm_budget = budget - self.outside_recorded
        floor, floor_step = layout.floor()
        if hbm_budget < floor:
            if not self.at_least_floor:
                raise _errors.FailedPrecondition(self._floor_message(budget, layout, floor,
                                                                      floor_step), 5)
            hbm_budget = floor
            budget = floor + self.outside_recorded
        self.layout, self.budget, self.hbm_budget = layout, budget, hbm_budget
        self.floor = (floor + self.outside_recorded, floor_step)
        tool = planning.find_tool()
        device = self.device
        if device is None:
            h2d, d2h, latency = planning.measure_links(
                self.client, "%s/calibration" % self.prefix,
                min(32 << 20, max(1 << 20, hbm_budget // 4) // 4096 * 4096))
            device = os.path.join(self.workdir, "profile.json")
            planning.write_profile(device, h2d, d2h, latency)
        sched, plan, self.plan_doc, self.plan_summary = planning.plan(
            tool, self.workdir, layout.schedule(recipes=self.recompute > 0), hbm_budget, device,
            self.recompute)
        layout.set_recomputes(self.plan_doc.get("recomputes", []))
        self.saved.track_seqs = bool(layout.recomputed)
        self.plan = self.client.register_plan(
            sched, plan, name=self.name, hbm_budget_bytes=hbm_budget,
            owned_prefix="" if self.keep_objects else self.prefix + "/")
        self._move_in()
        self.mode = PLANNED

    def _floor_message(self, budget, layout, floor, step):
        label, phase, _ = layout.steps[step]
        lowest = floor + self.outside_recorded
        return ("a budget of %.1f MiB (%.0f%% of the no-offload peak of %.1f MiB) is below this "
                "job's floor of %.1f MiB (%.0f%%): step %d (%s %s) holds %.1f MiB in hbm at "
                "once, and the trainer held %.1f MiB outside tierpool; give a budget of at "
                "least %.0f%%, or at_least_floor=True"
                % (budget / 2**20, 100 * budget / self.no_offload_peak,
                   self.no_offload_peak / 2**20, lowest / 2**20,
                   100 * lowest / self.no_offload_peak, step, phase, label, floor / 2**20,
                   self.outside_recorded / 2**20, 100 * lowest / self.no_offload_peak + 0.5))

    def _move_in(self):
        """Puts the parameters and optimizer states into tierpool (in hbm those the plan has
        there as an iteration starts) and leaves placeholders in their place."""
        resident = {int(t) for t in self.plan_doc.get("resident_at_start", [])}
        tier = lambda tid: "hbm" if tid in resident else None  # noqa: E731
        for h in self.params.held:
            tid = self.layout.param_tensor[h.index]
            self.client.put(h.key, h.param.data.contiguous(), kind="weight", tier=tier(tid))
            h.param.data = h.placeholder
            if h.param.grad is not None:
                h.param.grad = None
        self.move_states_in(tier)
        gc.collect()
        self._outside.offset = memory.host_bytes_in_use()
        self._outside.take_peak()

    def move_states_in(self, tier=lambda tid: None):
        """Puts the optimizer states of the held parameters into tierpool (the plan's key for
        each, ``tier(tensor id)``), placeholders in their place."""
        for h in self.params.held:
            def key_of(name, h=h):
                tid = self.layout.state_tensor.get((h.index, name))
                return ("%s/s/%s/%s" % (self.prefix, h.name, name) if tid is None
                        else self.layout.key(tid))

            def tier_of(name, h=h):
                tid = self.layout.state_tensor.get((h.index, name))
                return None if tid is None else tier(tid)

            self.updates.move_in(h.param, h.index, key_of, tier_of)

    # ---- reports ----

    def _job_counters(self, stat):
        for j in stat.get("jobs", []):
            if j["id"] == self.plan.job_id:
                return j["counters"]
        return {}

    def _make_report(self):
        stat = self.client.stat()
        counters = self._job_counters(stat)
        links = stat.get("counters", {})
        now = dict(counters, link_in=links.get("link_dram_hbm_bytes", 0),
                   link_out=links.get("link_hbm_dram_bytes", 0))
        last = self._last or {}
        d = lambda name: now.get(name, 0) - last.get(name, 0)  # noqa: E731
        self._last = now
        r = StepReport(
            iteration=self._iteration,
            seconds=time.perf_counter() - self._t0 if self._t0 is not None else 0.0,
            budget=self.budget, hbm_budget=self.hbm_budget,
            no_offload_peak=self.no_offload_peak,
            hbm_peak=counters.get("hbm_peak_bytes", 0),
            outside_peak=max(self._outside_iter, self._outside.take_peak()),
            issued=d("actions_issued"), skipped=d("actions_skipped"),
            skipped_absent=d("skipped_absent"), skipped_in_place=d("skipped_in_place"),
            skipped_dead=d("skipped_dead"), cancelled=d("actions_cancelled"),
            failed=d("failed"), waited_for_room=d("waited_for_room"), hits=d("hits"),
            late=d("late"), late_wait_us=d("late_wait_us"), misses=d("misses"),
            bytes_in=d("bytes_in"), bytes_out=d("bytes_out"), link_in=d("link_in"),
            link_out=d("link_out"), recomputed=self.remakes.made,
            recomputed_late=self.remakes.made_late,
            reads_below_hbm=self._below,
            unplanned=self._unplanned_now, diverged=self._diverged)
        self.reports.append(r)
        self.report = r
        if self.on_step is not None:
            self.on_step(r)

    # ---- for the training loop ----

    def clip_grad_norm_(self, parameters, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """``torch.nn.utils.clip_grad_norm_`` for this job, whose gradients live in tierpool
        between backward and ``optimizer.step()`` (``p.grad`` is None then, and torch's would
        see none of them). The same norm in the same order, the same scaling."""
        return self.updates.clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite)

    # ---- the end ----

    def close(self):
        """Brings the parameters and optimizer states back into the trainer's memory, ends the
        plan (the server deletes the job's objects) and removes the hooks: the model and
        optimizer are plain PyTorch again. Idempotent."""
        if self.mode == CLOSED:
            return
        self.pop_hooks()
        if self.mode == PLANNED:
            self.params.release()
            for h in self.params.held:
                t = torch.empty(h.shape, dtype=h.dtype)
                self.client.get_into(h.key, t)
                h.param.data = t
            for i in list(self.updates.held):
                state = self.optimizer.state[self.params.held[i].param]
                for s, t in self.updates.read_in(i):
                    state[s.name] = t
        for h in self._hooks:
            h.remove()
        self._hooks.clear()
        self.grads.remove()
        self.updates.remove()
        self.state_dicts.remove()
        del self.model.forward  # the class's again
        if self.plan is not None:
            self.plan.unregister()
            self.plan = None
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.mode = CLOSED

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
