"""What one training step under the plan did (``OffloadJob.report``)."""

import dataclasses


def _mib(n):
    return "%.1f MiB" % (n / 1048576)


@dataclasses.dataclass
class StepReport:
    """One iteration (a step of training, ended by ``optimizer.step()``) under the plan.

    Actions are the executor's for this iteration: ``issued`` (moves started, or free drops of
    a clean copy), ``skipped`` with why (``skipped_absent``: the object did not exist, which for
    a tensor the job holds means it was deleted already or never stored; ``skipped_in_place``:
    already where the action would put it; ``skipped_dead``: a free of a dead tensor's only
    copy, which the job deletes itself), ``cancelled`` (a prefetch whose use came first) and
    ``failed``. ``hits``/``late``/``misses`` count reads of the hbm copy: there, on its way
    (``late_wait_us`` waited in all), or brought up on demand. ``bytes_in``/``bytes_out`` are the
    executor's moves, ``link_in``/``link_out`` every byte the server moved between dram and hbm
    in the step (everyone's, on a shared server).

    Memory: ``hbm_peak`` is the job's highest use of hbm (its namespace's copies and room on its
    way in), ``outside_peak`` the highest memory the trainer held outside tierpool (on the host:
    its anonymous resident memory beyond what it held before the step). ``working_set`` is their
    sum, against ``budget``."""

    iteration: int
    seconds: float
    budget: int
    hbm_budget: int
    no_offload_peak: int
    hbm_peak: int
    outside_peak: int
    issued: int = 0
    skipped: int = 0
    skipped_absent: int = 0
    skipped_in_place: int = 0
    skipped_dead: int = 0
    cancelled: int = 0
    failed: int = 0
    waited_for_room: int = 0
    hits: int = 0
    late: int = 0
    late_wait_us: int = 0
    misses: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    link_in: int = 0
    link_out: int = 0
    recomputed: int = 0  # saved activations the plan recomputes, made again at their step
    recomputed_late: int = 0  # ... made when backward read them (the step had diverged)
    reads_below_hbm: int = 0  # views the server gave from dram (copied into the trainer)
    unplanned: int = 0  # tensors stored under keys the plan does not name
    diverged: str = ""  # where the step left the recorded one, if it did

    @property
    def working_set(self):
        return self.hbm_peak + self.outside_peak

    @property
    def actions(self):
        return self.issued + self.skipped + self.cancelled + self.failed

    @property
    def carried_out(self):
        """Share of the step's actions the executor carried out, or found already done."""
        n = self.actions
        return 1.0 if n == 0 else (self.issued + self.skipped_in_place + self.skipped_dead) / n

    def __str__(self):
        lines = [
            "step %d: %.3f s; working set %s (hbm %s + outside %s) of a %s budget "
            "(no offload: %s)" % (self.iteration, self.seconds, _mib(self.working_set),
                                  _mib(self.hbm_peak), _mib(self.outside_peak),
                                  _mib(self.budget), _mib(self.no_offload_peak)),
            "  actions %d: %d issued, %d skipped (%d absent, %d already in place, %d left to "
            "the job's delete), %d cancelled, %d failed; %.1f%% carried out"
            % (self.actions, self.issued, self.skipped, self.skipped_absent,
               self.skipped_in_place, self.skipped_dead, self.cancelled, self.failed,
               100 * self.carried_out),
            "  reads of hbm: %d hits, %d late (%.1f ms), %d misses; moved %s in, %s out "
            "(links: %s in, %s out)" % (self.hits, self.late, self.late_wait_us / 1e3,
                                        self.misses, _mib(self.bytes_in), _mib(self.bytes_out),
                                        _mib(self.link_in), _mib(self.link_out)),
        ]
        if self.recomputed or self.recomputed_late:
            lines.append("  recomputed %d saved activations at their steps, %d when read"
                         % (self.recomputed, self.recomputed_late))
        if self.reads_below_hbm or self.unplanned or self.diverged:
            lines.append("  %d reads from below hbm, %d unplanned tensors%s"
                         % (self.reads_below_hbm, self.unplanned,
                            "; diverged: " + self.diverged if self.diverged else ""))
        return "\n".join(lines)
