//! Binds pending pods to nodes.
