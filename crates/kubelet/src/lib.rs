//! The node agent.
