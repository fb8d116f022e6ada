"""The HTTP layer: routes, the server, the web config file, basic auth, the live page."""
