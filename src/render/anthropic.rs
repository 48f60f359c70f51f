//! Anthropic Messages request body.
