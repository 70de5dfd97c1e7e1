//! The peer's SETTINGS as both engines apply them: what its codec applies to what is written to
//! it (the largest frame, the HPACK table size), and the initial stream window it grants, which
//! gives each new stream its send window and moves every open one's (RFC 9113, 6.9.2).

use h2::Codec;
use h2::frame::Settings;

use super::Window;

/// The peer's SETTINGS that its codec applies to what is written to it (the largest frame, the
/// HPACK table size); the largest DATA payload the peer now accepts, if it said.
pub(crate) fn apply_codec_settings<T, B>(
    codec: &mut Codec<T, B>,
    settings: &Settings,
) -> Option<usize>
where
    B: bytes::Buf,
{
    if let Some(size) = settings.header_table_size() {
        codec.set_send_header_table_size(size as usize);
    }
    let size = settings.max_frame_size()? as usize;
    codec.set_max_send_frame_size(size);
    Some(size)
}

/// The peer's SETTINGS_INITIAL_WINDOW_SIZE (65,535 until it says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct InitialWindow(u32);

impl Default for InitialWindow {
    fn default() -> Self {
        InitialWindow(65_535)
    }
}

impl InitialWindow {
    /// A new stream's send window.
    pub(crate) fn window(self) -> Window {
        Window::new(self.0)
    }

    /// The peer said `size`: by how much every open stream's send window moves (`Window::shift`).
    pub(crate) fn set(&mut self, size: u32) -> i64 {
        let delta = i64::from(size) - i64::from(self.0);
        self.0 = size;
        delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_initial_window_moves_every_stream_by_the_difference() {
        let mut initial = InitialWindow::default();
        assert_eq!(initial.window().size(), 65_535);
        assert_eq!(initial.set(16_384), 16_384 - 65_535);
        assert_eq!(initial.window().size(), 16_384);
        assert_eq!(initial.set(1 << 20), (1 << 20) - 16_384);
    }
}
