"""The kernel process entry point named by our kernelspec.

``python -m kernel_agent.launcher -f CONNECTION_FILE [ipykernel options]``:
apply the session's limits (handed over in ``KERNEL_AGENT_LIMITS``), then
become an ordinary ipykernel. Exit code 97 means a requested confinement
could not be set up; the message is on stderr.
"""

from __future__ import annotations

import os
import sys

CONFINEMENT_FAILED = 97


def main(argv: list[str] | None = None) -> None:
    from kernel_agent.limits import LIMITS_ENV, Limits, apply_in_kernel

    limits = Limits.from_env(os.environ.pop(LIMITS_ENV, None))
    try:
        apply_in_kernel(limits)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"kernel-agent launcher: cannot apply {limits}: {exc}\n")
        sys.exit(CONFINEMENT_FAILED)
    from ipykernel.kernelapp import launch_new_instance

    launch_new_instance(argv=sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
