//! Summaries: the Summarizer trait, the extractive summarizer, tool-output post-processing.
