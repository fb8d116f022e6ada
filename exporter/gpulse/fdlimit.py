"""How many files the process may hold open: the soft limit raised toward a need, up
to the hard limit, as Go programs do at start. Containers and login shells often start
at a soft 1,024, below what the server's connections or a large job's logs (one open
file per node's log) need, while the hard limit allows far more."""
from __future__ import annotations


def raise_open_files(want: int) -> int | None:
    """Raise the soft RLIMIT_NOFILE to `want` (at most the hard limit) where it is
    lower; the soft limit now, or None where it is unlimited or cannot be read."""
    try:
        import resource     # POSIX only
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            soft = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    except (ImportError, ValueError, OSError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft
