//! Images as text: what stands for an image wherever it cannot be sent as
//! one (a provider that refuses its type, a role that takes only text, a
//! tool output imported as text). A data URL is never inlined as text: it
//! would cost far more tokens than the image.

/// The (media type, base64 data) of a `data:` URL, if it is one.
pub(crate) fn data_url(url: &str) -> Option<(&str, Option<&str>)> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',').unwrap_or((rest, ""));
    let mut params = meta.split(';');
    let media_type = params.next().unwrap_or_default();
    let base64 = params.any(|p| p == "base64");
    Some((media_type, base64.then_some(data)))
}

/// The text that stands for an image where it cannot be sent: the URL, or
/// for inline data its type and size.
pub fn reference(url: &str) -> String {
    match data_url(url) {
        None => format!("[image: {url}]"),
        Some((media_type, data)) => {
            let media_type = if media_type.is_empty() {
                "unknown type"
            } else {
                media_type
            };
            let bytes = data.map_or(url.len(), |d| d.len() / 4 * 3);
            format!("[image: inline {media_type}, about {bytes} bytes, not sent]")
        }
    }
}
