"""The emulated home network around a Homework router: `Home` to drive it, `wait_until` to wait.

`Home` composes the parts, each usable on its own: `Topology` (namespaces, links, OVS), `Stations`
(the devices), `RouterServices` (the router's services from deploy/services.toml) and `WsV1Client`
(the controller's API)."""

from .home import INTERNET_HOST, INTERNET_IP, REPO, ROUTER_LAN_IP, WEBUI_URL, Home
from .services import HomenetError, RouterServices
from .stations import Stations
from .topology import Topology
from .wait import WaitTimeout, wait_until
from .wsv1 import WsV1Client

__all__ = [
    "Home",
    "HomenetError",
    "RouterServices",
    "Stations",
    "Topology",
    "WaitTimeout",
    "WsV1Client",
    "wait_until",
    "INTERNET_HOST",
    "INTERNET_IP",
    "REPO",
    "ROUTER_LAN_IP",
    "WEBUI_URL",
]
