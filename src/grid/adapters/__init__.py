"""Thin edges: sockets, TLS, HTTP servers, stores, backbones and scraping."""
