"""benchlib: what the Python benchmark scripts in bench/ share (imported, not run): a free
loopback port for the processes they start."""
import socket


def port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
