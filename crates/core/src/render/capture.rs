//! Human rendering of `latscope capture`'s result.

use crate::model::capture::CaptureReport;
use crate::render::{Human, Page};

impl Human for CaptureReport {
    fn render_human(&self, out: &mut Page) {
        use crate::units::count;
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "{} captured on {} in {:.1}s ({}) -> {}",
            count(self.packets, "packet"),
            self.interface,
            self.duration_ns as f64 / 1e9,
            crate::units::format_bytes(self.bytes as f64),
            self.file
        );
        let _ = writeln!(
            out,
            "{} received by filter ({}), {} dropped by kernel",
            count(self.kernel_received, "packet"),
            self.filter_mode,
            self.kernel_drops
        );
        if self.kernel_drops > 0 {
            let _ = writeln!(
                out,
                "  warning: the ring overflowed; use a larger --buffer, a narrower filter or a smaller --snaplen"
            );
        }
        if self.interrupted {
            let _ = writeln!(
                out,
                "  (interrupted by Ctrl-C: the file holds every packet captured until then)"
            );
        }
    }
}
