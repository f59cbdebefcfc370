"""tierpool: keep tensors in the node's tierpoold (hbm, dram, remote, nvme) and get them back.

    import tierpool
    with tierpool.Client() as c:
        c.put("layer3.act", array)          # anything with the buffer protocol, or a CPU tensor
        c.get_into("layer3.act", out)       # into a buffer you own
        with c.view("layer3.act") as mv:    # zero copy, pinned while held
            ...

``tierpool.torch`` has activation and optimizer-state offload and a KV-block store.
"""

from ._errors import (Aborted, AlreadyExists, DataLoss, DeadlineExceeded, FailedPrecondition,
                      Internal, InvalidArgument, IoError, NotFound, PermissionDenied,
                      ResourceExhausted, TierpoolError, Unavailable, Unimplemented)
from .client import Client, DeviceView, Durability, Kind, ObjectInfo, Plan, Reservation, Tier

__version__ = "0.1.0"

__all__ = [
    "Client", "Reservation", "DeviceView", "Plan", "ObjectInfo", "Tier", "Kind", "Durability",
    "TierpoolError", "InvalidArgument", "NotFound", "AlreadyExists", "ResourceExhausted",
    "FailedPrecondition", "Unavailable", "DataLoss", "Internal", "DeadlineExceeded",
    "Unimplemented", "IoError", "Aborted", "PermissionDenied",
]
