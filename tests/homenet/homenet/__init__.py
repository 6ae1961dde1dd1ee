"""The emulated home network around a Homework router: `Home` to drive it, `wait_until` to wait."""

from .home import INTERNET_HOST, INTERNET_IP, REPO, ROUTER_LAN_IP, WEBUI_URL, Home
from .services import HomenetError
from .wait import WaitTimeout, wait_until

__all__ = [
    "Home",
    "HomenetError",
    "WaitTimeout",
    "wait_until",
    "INTERNET_HOST",
    "INTERNET_IP",
    "REPO",
    "ROUTER_LAN_IP",
    "WEBUI_URL",
]
