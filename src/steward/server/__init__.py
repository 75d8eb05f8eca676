"""``steward serve``: the HTTP/SSE API, the web page and chat channels (``create_app``)."""
