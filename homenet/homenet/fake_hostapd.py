"""hostapd's control socket in a test: a real Unix datagram socket that answers `STA <mac>` from `stations`
and drops a station it has at `DEAUTHENTICATE <mac> [tx=0]` (OK), FAIL for a station it does not have and for
any other request, and records every request in `asked`. What the router's radio and a satellite's agent ask
of hostapd, without a radio."""

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
            self.sock.sendto(self._answer_to(request.split()).encode(), sender)

    def _answer_to(self, words: list[str]) -> str:
        if words[:1] == ["STA"] and len(words) == 2:
            return self.stations.get(words[1], "FAIL")
        if words[:1] == ["DEAUTHENTICATE"] and len(words) in (2, 3) and words[1] in self.stations:
            del self.stations[words[1]]
            return "OK"
        return "FAIL"

    def close(self) -> None:
        self.sock.close()
        os.unlink(self.path)
