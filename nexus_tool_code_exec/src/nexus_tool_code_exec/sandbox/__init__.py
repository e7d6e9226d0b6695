"""The OS-level isolation of a run_code child: what `enter()` does to a freshly forked process.

Runs in the child (`enter`), in the zygote (`prepare`, `make_shared_netns`, once before it forks)
and in the host (`probe`, `layer_statuses`: which layers work on this machine). The zygote forks
one child per script; the child calls `enter(policy)` before the script's first line and from then
on can reach the host only through the pipe fds it kept. The AST check in front of it only gives
early, clear errors; this package is the boundary.

    policy.py   the layers' names and order, `Limits`, `SandboxPolicy`, `SandboxError`
    paths.py    the read-only paths the child's Python runtime needs (Landlock's rules)
    layers.py   `enter()`: each layer applied, in order; `prepare()` for the zygote
    seccomp.py  the seccomp filter, assembled as classic BPF
    landlock.py Landlock through its three syscalls
    view.py     the runtime view: a mount namespace where the runtime is readable without any
                capability (what lets ``uid`` drop them all)
    probes.py   each layer applied alone in a forked child and attacked; `nexus doctor`'s lines
    libc.py     the C library calls the layers make

Layers (fixed names, applied in this order; `SandboxPolicy.layers` picks which):

- ``env``      os.environ (and libc's environ) cleared to HOME/TMPDIR=scratch, LANG=C.UTF-8,
               TZ=UTC0; the initial environment block on the stack, which /proc/self/environ
               shows, is zeroed too.
- ``rlimits``  RLIMIT_AS (memory_mb), RLIMIT_CPU (cpu_seconds soft, +1 s hard), RLIMIT_NOFILE,
               RLIMIT_FSIZE, RLIMIT_CORE=0, RLIMIT_NPROC (threads; counted only for a non-root
               uid, so it bites together with ``uid``); one malloc arena and 4 MiB thread stacks so
               the script's own threads fit under the address-space cap.
- ``net``      a network namespace of its own: no interfaces but a loopback that is down. As root
               it is created directly (or joined, see `make_shared_netns`); otherwise inside a
               new user namespace, which is the only way an unprivileged process can make one.
- ``uid``      (root only) the child stops being root: a per-run uid/gid (uid_base + pid, so no
               two live children share one), no supplementary groups, and no capabilities at all.
               A runtime below a folder other users may not search (/root/.pyenv) is reached
               through the runtime view (view.py), which the zygote makes once; only where no
               view can be made does the child keep CAP_DAC_READ_SEARCH (and says so). The scratch
               dir is chowned to that uid. Every kernel check of the form "same owner or
               privileged" now fails against the host's processes (kill, ptrace, prlimit,
               setpriority, sched_setaffinity, SIGIO owners...) and against folders other users
               may not search: stat, readlink, getxattr and inotify there get EACCES.
- ``fs``       Landlock (ABI-aware): read-only use of `read_paths`, read-write use of scratch_dir,
               /dev/null read-write, nothing else; never execute. ABI >= 4: every TCP bind/connect
               refused. ABI >= 6: no signals to and no abstract unix sockets of processes outside
               the sandbox.
- ``seccomp``  last, with no_new_privs: see `seccomp.py` for the full list. fork, vfork, clone
               without CLONE_THREAD (or with namespace flags), execve(at), socket(pair), ptrace,
               process_vm_*, signals/pidfds/prlimit/scheduling aimed at another pid, namespaces and
               mounts and mount listings (statmount, listmount), inotify and fanotify, keyrings,
               bpf, perf, userfaultfd, io_uring, modules, SysV/POSIX IPC, clock and host settings
               (EPERM); every xattr call (EOPNOTSUPP); chmod/chown/utime when ``uid`` is off. clone3 gets
               ENOSYS (glibc then falls back to clone, whose flags BPF can see); syscalls newer than
               the table get ENOSYS; a foreign architecture or x32 syscall kills the process.

Always done, whatever the layers: own process group (`os.setpgid(0, 0)`, so a timeout can kill
the group; not setsid, whose scheduler autogroup costs up to several ms), every fd not kept
closed and 0/1/2 on /dev/null unless kept, cwd = scratch_dir, no .pyc writing, and SIGKILL when
the parent (the zygote) dies.

What a script sees when it is refused (errno -> Python exception):

- open/listdir/write/rename outside its paths: EACCES -> PermissionError (Landlock); a hard link
  out of scratch: EXDEV -> OSError.
- socket(), socketpair(): EPERM -> PermissionError (seccomp). Without seccomp: TCP connect/bind
  EACCES -> PermissionError (Landlock), otherwise ENETUNREACH -> OSError (network namespace).
- os.fork(), subprocess, os.posix_spawn, os.exec*(): EPERM -> PermissionError.
- os.kill/killpg/pidfd_open/sched_setaffinity/setpriority/prlimit on another process: EPERM ->
  PermissionError (seccomp, and independently ``uid`` and Landlock scoping).
- ptrace, process_vm_readv/writev, mount, unshare, bpf, keyctl, ...: EPERM (ctypes callers see -1).
- chmod/chown/utime/setxattr when ``uid`` is off: EPERM -> PermissionError.
- memory: ENOMEM -> MemoryError. CPU time: SIGXCPU at cpu_seconds, SIGKILL one second later.
  File size: EFBIG -> OSError "File too large" (CPython ignores SIGXFSZ). Open files: EMFILE ->
  OSError "Too many open files". Threads beyond the limit: EAGAIN -> RuntimeError "can't start
  new thread".

For the zygote: call `prepare(policy)` once before forking (the seccomp programs, the Landlock
ruleset and the environment block's address are then worked out once instead of in every child),
pass `make_shared_netns()`'s fd as `SandboxPolicy.net_fd` (joining a namespace costs ~15 us,
creating one ~0.6 ms), start the zygote itself with a clean environment, and `gc.freeze()` after
its imports so children do not copy-on-write the whole heap on their first collection.

What a child can still do (known, by design or beyond these layers):

- stat() or readlink() a path it can guess in a folder every user may search: existence, size,
  owner, times, a link's target (Landlock governs opening and changing the tree, not metadata
  reads; seccomp cannot read a path argument). Never the content, a listing, an xattr or a
  watch; below a folder other users may not search, nothing (EACCES, or ENOENT in the view).
- read heap copies of the zygote's environment with ctypes: enter() clears os.environ, libc's
  environ and the exec-time block, not freed heap memory. Start the zygote with a clean env.
- fill the scratch file system: RLIMIT_FSIZE bounds each file, not their number; put scratch on
  a size-limited file system if that matters. Same for memfd_create (tmpfs memory, file_size_mb
  per memfd, open_files of them).
- use every CPU core with threads, for cpu_seconds of CPU time in total (the wall-clock timeout is
  the runner's).
- without ``seccomp``: connect to a pathname unix socket it can reach (they cross network
  namespaces, and Landlock ABI <= 7 does not govern connect); without ``fs``: read every file
  other users may (every file root may, if ``uid`` is off too, and write them). The layers are
  meant to be used together; `probe()` says which this machine has.
- the deny-list filter allows syscalls it does not name; unknown numbers above the table get
  ENOSYS. A thread may change its own affinity or priority (pid 0), not another process's.
"""

from .layers import (CEILING_CPU_SECONDS, CEILING_MEMORY_MB, FIXED_ENV_KEYS, applied, enter, lower_limits,
                     make_shared_netns, prepare)
from .paths import RUNTIME_PACKAGES, runtime_read_paths
from .policy import ALL_LAYERS, DEFAULT_UID_BASE, LAYERS, LayerStatus, Limits, SandboxError, SandboxPolicy
from .probes import ENV_DISABLE_LAYERS, ChildOutcome, doctor_lines, layer_statuses, probe, run_in_child

__all__ = [
    "ALL_LAYERS", "CEILING_CPU_SECONDS", "CEILING_MEMORY_MB", "DEFAULT_UID_BASE", "ENV_DISABLE_LAYERS",
    "FIXED_ENV_KEYS", "LAYERS", "RUNTIME_PACKAGES", "ChildOutcome",
    "LayerStatus", "Limits", "SandboxError", "SandboxPolicy", "applied", "doctor_lines", "enter",
    "layer_statuses", "lower_limits", "make_shared_netns", "prepare", "probe", "run_in_child", "runtime_read_paths",
]
