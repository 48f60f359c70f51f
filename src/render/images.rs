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

/// True when the image can go to the provider as an image.
pub fn sendable(url: &str) -> bool {
    match data_url(url) {
        None => true,
        Some((media_type, Some(_))) => {
            let media_type = media_type.to_ascii_lowercase();
            let media_type = if media_type == "image/jpg" {
                "image/jpeg"
            } else {
                media_type.as_str()
            };
            SENDABLE_MEDIA_TYPES.contains(&media_type)
        }
        Some((_, None)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
