"""The parity tests' Python references (tests/trainer_reference.py, tests/ddp_reference.py) served
by one process that imported torch once.

  reference_server.py start SOCKET [OWNER]
                                     imports torch and the references, listens on the UNIX socket
                                     SOCKET in the background, and returns once it listens
                                     (ctest's fixture PythonReference.Start); it ends when the
                                     process OWNER (default: the caller) has ended
  reference_server.py stop SOCKET    asks it to end (PythonReference.Stop)

Why: importing torch costs 1-3.3 s of the clock (Debian's 1.13, PyPI's 2.11) and each of the 44
parity cases of a build ran its reference as a new Python. Here each request is served by a
child forked from the server, the way the reference already forks its ranks (reference_util.
run_ranks): the server has run no tensor operation and has no thread, so the child starts where
a fresh `python trainer_reference.py` would be after its imports. A request is one line of JSON,
{"script": "trainer_reference.py", "argv": [its flags], "env": {the client's variables}}; the
child refuses a request whose variables that the libraries read as they load (LOAD_TIME) differ
from the server's (other kernels would run), else runs the script's main() with the flags, its stdout and
stderr the connection, and ends with the line "[reference exit N]". The C++ side (run_reference
in tests/reference.cpp) runs the reference itself when no server answers. The server ends when asked, when its socket file is gone, when the process that started it
(OWNER: ctest, named by the fixture) has ended (a run stopped by Ctrl-C leaves no server behind), or after 30 minutes without
a request.
"""
import json
import os
import select
import socket
import sys
import time
import traceback

IDLE_S = 1800


# What the libraries read when they load (kernels, threads): the server's must be the client's,
# or a case would run other kernels than the same command run by itself (tests/kernels.cpp).
LOAD_TIME = ("OPENBLAS_", "DNNL_", "ONEDNN_", "MKL_", "OMP_", "KMP_", "GOMP_", "ATEN_")


def load_time_env(env):
    return {k: v for k, v in env.items() if k.startswith(LOAD_TIME)}


SCRIPTS = ("trainer_reference.py", "ddp_reference.py", "fsdp_reference.py")  # chapter 05's reference, 03-04's, 07's


def run_case(conn, request, started_with):
    """In the forked child: the reference's main() with the request's flags, output to the client."""
    script = request.get("script", SCRIPTS[0])
    if script not in SCRIPTS:
        conn.sendall(f"[reference server refused: it serves {' and '.join(SCRIPTS)}, not {script}]\n".encode())
        return
    reference = __import__(script[:-3])
    ours, theirs = started_with, load_time_env(request.get("env", {}))
    if ours != theirs:  # no verdict line: the client runs the reference itself
        differ = sorted(k for k in set(ours) | set(theirs) if ours.get(k) != theirs.get(k))
        conn.sendall(f"[reference server refused: its environment differs in {', '.join(differ)}]\n".encode())
        return
    os.dup2(conn.fileno(), 1)
    os.dup2(conn.fileno(), 2)
    sys.argv = [reference.__file__] + list(request["argv"])
    try:
        code = reference.main()
    except SystemExit as e:  # argparse's errors (2), sys.exit() calls
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: B036 - whatever it was, the client gets its trace and exit 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(1, f"\n[reference exit {code}]\n".encode())


def read_line(conn, limit=1 << 20):
    data = b""
    while not data.endswith(b"\n") and len(data) < limit:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode()


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def serve(path, ready_fd, owner):
    started_with = load_time_env(os.environ)  # before the reference sets its own (OPENBLAS_NUM_THREADS)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ddp_reference  # noqa: F401 - torch and the references, once
    import trainer_reference  # noqa: F401
    import fsdp_reference  # noqa: F401 - its fully_shard import stays in its main() (1.13 has none)
    import reference_util

    reference_util.import_before_fork()  # once here, not in each case (Note [Imports before the fork])
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if os.path.exists(path):
        os.unlink(path)
    server.bind(path)
    os.chmod(path, 0o600)  # the requests name files to load: this user's only
    server.listen(16)
    os.write(ready_fd, b"ok")
    os.close(ready_fd)
    last = time.monotonic()
    while os.path.exists(path) and time.monotonic() - last < IDLE_S and alive(owner):
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # the cases that ended
                pass
        except ChildProcessError:
            pass
        if not select.select([server], [], [], 1.0)[0]:
            continue
        conn, _ = server.accept()
        last = time.monotonic()
        request = json.loads(read_line(conn) or "{}")
        if request.get("stop"):
            conn.close()
            break
        print(f"{time.strftime('%H:%M:%S')} serving: {request.get('script')} {' '.join(request.get('argv', []))}")
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            server.close()
            try:
                run_case(conn, request, started_with)
            finally:
                os._exit(0)
        conn.close()
    if os.path.exists(path):
        os.unlink(path)


def start(path, owner):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server: its own session, its output to SOCKET.log (ctest waits for no pipe of it)
        os.close(r)
        os.setsid()
        log = os.open(path + ".log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        try:
            serve(path, w, owner)
        except BaseException:  # noqa: B036
            traceback.print_exc()
        finally:
            os._exit(0)
    os.close(w)
    ready = select.select([r], [], [], 120)[0] and os.read(r, 2) == b"ok"
    if not ready:
        with open(path + ".log") as f:
            print(f"the reference server did not start (pid {pid}); it said:\n{f.read()}")
        return 1
    print(f"serving tests/{' and tests/'.join(SCRIPTS)} on {path} (pid {pid}): torch imported once for the parity cases")
    return 0


def stop(path):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(path)
            s.sendall(b'{"stop": true}\n')
    except OSError as e:
        print(f"no reference server on {path} ({e.strerror}): nothing to stop")
        return 0
    print(f"the reference server on {path} stops")
    return 0


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4) or sys.argv[1] not in ("start", "stop") or not all(a.isdigit() for a in sys.argv[3:]):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    if sys.argv[1] == "start":
        sys.exit(start(sys.argv[2], int(sys.argv[3]) if len(sys.argv) == 4 else os.getppid()))
    sys.exit(stop(sys.argv[2]))
