//! Token counting: exact OpenAI encodings, an estimator, and the ledger cache.
