"""hostapd's control socket in a test: a real Unix datagram socket that answers `STA <mac>` from `stations`
(FAIL for a station it does not have, and for any other request) and records every request in `asked`. What
the router's radio and a satellite's agent ask of hostapd, without a radio."""

from __future__ import annotations

import os
import socket
import threading


class FakeHostapd:
    def __init__(self, path: str):
        self.path = path
        self.stations: dict[str, str] = {}  # MAC -> its `STA` answer
        self.asked: list[str] = []
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        threading.Thread(target=self._answer, daemon=True).start()

    def _answer(self) -> None:
        while True:
            try:
                data, sender = self.sock.recvfrom(4096)
            except OSError:
                return  # closed
            request = data.decode()
            self.asked.append(request)
            words = request.split()
            answer = self.stations.get(words[1], "FAIL") if words[0] == "STA" and len(words) == 2 else "FAIL"
            self.sock.sendto(answer.encode(), sender)

    def close(self) -> None:
        self.sock.close()
        os.unlink(self.path)
