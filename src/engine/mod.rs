//! The engine. (being written)
