"""The trainer's own memory outside tierpool: on the host, the bytes malloc has handed out and
not had back (the extension's HostMemorySampler says why not resident memory). A sampler thread
reads it every millisecond without the interpreter lock; the job samples it at every step
boundary too."""

from ... import _tierpool


def host_bytes_in_use():
    return _tierpool.host_bytes_in_use()


class OutsideMemory:
    """Memory the job holds outside tierpool: host memory in use less ``offset``, its peak kept
    between ``take_peak`` calls. ``offset`` is the process's memory that is not the job's (set
    once the job's tensors are in tierpool), moved by the recording as it counts tensors it
    will hold."""

    def __init__(self, interval_us=1000.0):
        self._sampler = _tierpool.HostMemorySampler(float(interval_us))

    @property
    def offset(self):
        return self._sampler.offset

    @offset.setter
    def offset(self, value):
        self._sampler.offset = int(value)

    def sample(self):
        return self._sampler.sample()

    def take_peak(self):
        return self._sampler.take_peak()
