//! Which images a provider can be sent, and how the others are referenced.
//!
//! Both OpenAI and Anthropic take JPEG, PNG, GIF and WebP; an inline image of
//! any other type (SVG, BMP, TIFF, HEIC) makes the request fail. A URL is
//! fetched by the provider, so it is passed on as it is. An image that cannot
//! be sent is replaced by a short text reference; a data URL is never inlined
//! as text (it would cost far more tokens than the image).

pub(crate) use crate::model::image::data_url;
pub use crate::model::image::reference;

/// Media types of inline images every supported provider accepts.
pub const SENDABLE_MEDIA_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// How an image goes to a provider that takes it as an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sendable<'a> {
    /// A URL the provider fetches.
    Url(&'a str),
    /// Inline base64 data of an accepted type, the type spelled as the
    /// providers accept it (`image/JPG` → `image/jpeg`).
    Inline {
        media_type: &'static str,
        data: &'a str,
    },
}

/// The form in which the image can be sent as one; `None` when it cannot
/// (a type no provider takes, data that is not base64, no data at all).
pub(crate) fn sendable_form(url: &str) -> Option<Sendable<'_>> {
    match data_url(url) {
        None => Some(Sendable::Url(url)),
        Some((media_type, Some(data))) if !data.is_empty() => {
            let media_type = media_type.to_ascii_lowercase();
            let media_type = if media_type == "image/jpg" {
                "image/jpeg"
            } else {
                media_type.as_str()
            };
            let media_type = SENDABLE_MEDIA_TYPES.iter().find(|t| **t == media_type)?;
            Some(Sendable::Inline { media_type, data })
        }
        Some(_) => None,
    }
}

/// True when the image can go to the provider as an image.
pub fn sendable(url: &str) -> bool {
    sendable_form(url).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Providers take the media type only as they spell it.
    #[test]
    fn inline_types_are_sent_as_providers_spell_them() {
        assert_eq!(
            sendable_form("data:image/JPG;base64,/9j/4AAQ"),
            Some(Sendable::Inline {
                media_type: "image/jpeg",
                data: "/9j/4AAQ"
            })
        );
        assert_eq!(sendable_form("data:image/png;base64,"), None);
        assert_eq!(
            sendable_form("https://x.test/a.png"),
            Some(Sendable::Url("https://x.test/a.png"))
        );
    }

    #[test]
    fn only_common_raster_types_are_sent_inline() {
        assert!(sendable("https://example.com/chart.svg"));
        assert!(sendable("data:image/png;base64,iVBORw0KGgo="));
        assert!(sendable("data:image/JPG;base64,/9j/4AAQ"));
        assert!(!sendable("data:image/svg+xml;base64,PHN2Zz4="));
        assert!(!sendable("data:image/svg+xml,<svg/>"));
        assert!(!sendable("data:image/bmp;base64,Qk0="));
        assert!(!sendable("data:;base64,AAAA"));
    }

    #[test]
    fn references_never_inline_data() {
        let data = format!("data:image/bmp;base64,{}", "Q".repeat(4000));
        let r = reference(&data);
        assert!(r.len() < 80, "{r}");
        assert!(r.contains("image/bmp") && r.contains("3000 bytes"), "{r}");
        assert_eq!(
            reference("https://x.test/a.png"),
            "[image: https://x.test/a.png]"
        );
    }
}
