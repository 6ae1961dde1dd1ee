"""ws.v1: the WSGI app (`api`), its operations declared once (`operations`), who may do what (`authority`), the
edge's and the radio's calls (`ws_service`), the threaded server and the controller's lock (`server`). Imports
core, radio and the layers below; never edge."""
