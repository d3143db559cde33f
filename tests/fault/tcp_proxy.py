"""A TCP fault proxy (threads + sockets) for the fault suite: pass, delay, stall, reset.

One thread accepts; one thread per connection moves bytes both ways with select(). The mode is
read for every chunk, so a change takes effect at once on open connections:
  pass   forward everything
  delay  sleep N ms before forwarding each chunk
  stall  accept, read nothing, forward nothing (kernel buffers fill; the peer times out)
  reset  close every open connection with an RST and refuse (accept + RST) new ones
"""
import select
import socket
import struct
import threading
import time


def _rst_close(s):
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


class FaultProxy:
    def __init__(self, upstream_host, upstream_port, listen_port=0):
        self.upstream = (upstream_host, upstream_port)
        self.mode = "pass"
        self.delay_ms = 0
        self._lock = threading.Lock()
        self._conns = set()  # (client, upstream) pairs
        self._stop = False
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", listen_port))
        self.lsock.listen(128)
        self.lsock.settimeout(0.2)
        self.port = self.lsock.getsockname()[1]
        self.accepted = 0
        self.refused = 0
        self._thread = threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True)
        self._thread.start()

    # --- modes -------------------------------------------------------------------------------
    def set_pass(self):
        self.mode = "pass"

    def set_delay(self, ms):
        self.delay_ms = ms
        self.mode = "delay"

    def set_stall(self):
        self.mode = "stall"

    def set_reset(self):
        self.mode = "reset"
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c, u in conns:
            _rst_close(c)
            _rst_close(u)

    def set_upstream(self, host, port):
        self.upstream = (host, port)

    def close(self):
        self._stop = True
        self.set_reset()
        try:
            self.lsock.close()
        except OSError:
            pass

    # --- internals -----------------------------------------------------------------------------
    def _accept_loop(self):
        while not self._stop:
            try:
                c, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if self.mode == "reset":
                self.refused += 1
                _rst_close(c)
                continue
            self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), name="proxy-conn", daemon=True).start()

    def _serve(self, c):
        u = None
        try:
            # A stalled proxy accepts but does not even connect upstream until the stall ends.
            while self.mode == "stall" and not self._stop:
                time.sleep(0.05)
            if self.mode == "reset" or self._stop:
                _rst_close(c)
                return
            u = socket.create_connection(self.upstream, timeout=2)
            u.settimeout(None)
        except OSError:
            _rst_close(c)
            if u:
                _rst_close(u)
            return
        pair = (c, u)
        with self._lock:
            self._conns.add(pair)
        peer = {c: u, u: c}
        try:
            while not self._stop:
                with self._lock:
                    if pair not in self._conns:
                        return
                if self.mode == "stall":
                    time.sleep(0.05)
                    continue
                try:
                    r, _, _ = select.select([c, u], [], [], 0.05)
                except (OSError, ValueError):
                    return
                for s in r:
                    try:
                        data = s.recv(65536)
                    except OSError:
                        return
                    if not data:
                        return
                    if self.mode == "delay" and self.delay_ms > 0:
                        time.sleep(self.delay_ms / 1000.0)
                    while self.mode == "stall" and not self._stop:
                        time.sleep(0.05)
                    try:
                        peer[s].sendall(data)
                    except OSError:
                        return
        finally:
            with self._lock:
                self._conns.discard(pair)
            for s in pair:
                try:
                    s.close()
                except OSError:
                    pass
