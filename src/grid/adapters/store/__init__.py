"""Resource stores behind the `ResourceStore` port: embedded SQLite and Kubernetes."""
