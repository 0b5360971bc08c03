"""zbopt serve [INSTANCE]: the interactive schedule explorer in the browser (loopback only
unless --allow-remote)."""

from __future__ import annotations

import errno
import importlib.util
import ipaddress
import socket
import sys
import threading

from .. import signals
from ..errors import ZboptError
from ._common import add_instance_arguments, load, take_notes


def register(sub) -> None:
    parser = sub.add_parser("serve", help="interactive schedule explorer in the browser")
    add_instance_arguments(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; a non-loopback address "
                             "needs --allow-remote)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a "
                                                               "free one)")
    parser.add_argument("--open", action="store_true", help="open the page in a browser")
    parser.add_argument("--allow-remote", action="store_true",
                        help="allow a --host other machines can reach (anyone who can reach it "
                             "can run solves on this machine)")
    parser.set_defaults(func=run)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_host(host: str, allow_remote: bool) -> None:
    if not is_loopback(host) and not allow_remote:
        raise ZboptError(f"--host {host} is reachable from other machines and the explorer "
                         f"has no authentication: use a loopback address (127.0.0.1, ::1, "
                         f"localhost) or add --allow-remote to serve on {host} anyway")


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (port 0: a free one); ZboptError if that fails."""
    if not 0 <= port <= 65535:
        raise ZboptError(f"--port must be between 0 and 65535, got {port}")
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise ZboptError(f"--host {host}: {err.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(128)
    except OSError as err:
        sock.close()
        if err.errno == errno.EADDRNOTAVAIL:  # the host, not the port, is what to change
            raise ZboptError(f"cannot listen on {host}:{port}: {err.strerror}: --host must be an "
                             f"address of this machine (127.0.0.1, or 0.0.0.0 for all of them "
                             f"with --allow-remote)") from None
        raise ZboptError(f"cannot listen on {host}:{port}: {err.strerror}: pass another --port "
                         f"(0 picks a free one)") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/"


def run(args) -> int:
    check_host(args.host, args.allow_remote)
    instance = load(args)
    missing = [name for name in ("fastapi", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise ZboptError(f"zbopt serve needs the optional extra 'serve' ({', '.join(missing)} "
                         f"missing): pip install 'zbopt[serve]'")
    sock = listen(args.host, args.port)
    # the socket already queues connections: say where before the slower imports
    url = url_of(sock)
    print(f"zbopt serve: {url} (Ctrl+C stops it)", flush=True)
    for note in take_notes():  # how the input was taken: now, not when the server stops
        print(note, file=sys.stderr, flush=True)
    import uvicorn

    from ..serve.app import create_app
    app = create_app(instance, local_only=is_loopback(args.host))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           timeout_graceful_shutdown=2))
    if args.open:
        threading.Thread(target=_open_when_started, args=(server, url), daemon=True).start()
    if not is_loopback(args.host):
        print(f"zbopt serve: listening on {args.host}: anyone who can reach it can use it",
              file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl+C after its graceful shutdown
        pass
    signals.consumed()  # Ctrl-C (or SIGTERM) is how a server stops: not an interrupted command
    print("zbopt serve: stopped", file=sys.stderr, flush=True)
    return 0


def _open_when_started(server, url: str) -> None:
    import time
    import webbrowser
    while not server.started and not server.should_exit:
        time.sleep(0.05)
    if server.started:
        webbrowser.open(url)
