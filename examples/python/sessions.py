#!/usr/bin/python3
"""An operator's script: every session of a gpumuxd with its memory per device.

  python3 examples/python/sessions.py [ADDRESS]

ADDRESS: the daemon's socket (unix:///run/gpumux/gpumux.sock) or its
observe port (node-7:50051); default: $GPUMUX_ADDRESS or the default socket.
"""

import sys

import gpumux


def main():
    observer = gpumux.observe(sys.argv[1] if len(sys.argv) > 1 else None)
    devices = observer.list_devices()
    print(f"{'session':>8} {'client':<16} {'pid':>8} {'tenant':<12} {'gpu':>3} "
          f"{'allocated':>12} {'reserved':>12} {'peak':>12}")
    for session in observer.list_sessions():
        for usage in session["devices"]:
            if not usage["reserved_bytes"] and not usage["imported_bytes"]:
                continue
            print(f"{session['session_id']:>8} {session['client_name']:<16.16} {session['pid']:>8} "
                  f"{session['tenant']:<12.12} {usage['device']:>3} "
                  f"{usage['allocated_bytes'] / 2**20:>8.1f} MiB {usage['reserved_bytes'] / 2**20:>8.1f} MiB "
                  f"{usage['peak_allocated_bytes'] / 2**20:>8.1f} MiB")
    for device in devices:
        stats = observer.memory_stats(device.index)
        print(f"gpu {device.index} ({device.name}): {stats['allocated_bytes.all.current'] / 2**20:.1f} MiB "
              f"allocated, {stats['reserved_bytes.all.current'] / 2**20:.1f} MiB reserved of "
              f"{device.total_memory / 2**30:.1f} GiB")


if __name__ == "__main__":
    main()
