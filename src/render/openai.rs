//! OpenAI Chat Completions request body.
