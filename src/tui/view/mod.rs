//! `view(&Model, &mut Frame)`: the model as a frame, and nothing else.
//!
//! Side-effect free: it reads no clock (ages are computed against `model.now`), no file and no
//! environment (the theme and the time zone are in the model), so the same model always draws
//! the same screen. Times are written in `model.zone`, named once in the header; the zone is
//! UTC unless the runtime set the machine's (`TZ`, `/etc/localtime`, as chrono's `Local` reads them).
//! Every string that came from a job was made inert by the probes; it passes through
//! [`inert`] once more here, because a cell is the last gate before the terminal.
//!
//! The screen is drawn in parts, one module each: [`header`] (the header and the status
//! line), [`list`] (the action list), [`detail`] (the selected job), [`log`] (its log tail),
//! [`digest`] (the events and digest views), [`dialogs`] (the help, the dialog and the
//! chooser over the screen) and [`text`] (fitting words to cells).

mod detail;
mod dialogs;
mod digest;
mod header;
mod list;
mod log;
mod text;

use ratatui::Frame;
use ratatui::layout::Rect;

use super::model::Model;

pub use detail::{detail_lines, detail_split};
pub(crate) use dialogs::centered;
pub use dialogs::{KEYS, help_box, overlay};
pub use header::{header_height, status_height};
pub use list::sparkline;
pub use log::tail_block;
pub use text::fmt_age;
pub(crate) use text::{pad, wrap};

use detail::detail_pane;
use dialogs::{chooser_view, dialog_view, help, last_message};
use digest::{digest_view, events_view};
use header::{header, status_line};
use list::action_list;

/// Draws the whole screen.
pub fn view(model: &Model, frame: &mut Frame) {
    let size = frame.area();
    let areas = model.areas_in(size.width, size.height);
    header(model, frame, areas.header);
    if let Some(list) = areas.list {
        action_list(model, frame, list);
    }
    if let Some(detail) = areas.detail {
        detail_pane(model, frame, detail);
    }
    if model.digest.is_some() {
        let body = Rect::new(
            0,
            areas.header.height,
            size.width,
            areas.status.y.saturating_sub(areas.header.height),
        );
        digest_view(model, frame, body);
    } else if model.log.is_some() {
        let body = Rect::new(
            0,
            areas.header.height,
            size.width,
            areas.status.y.saturating_sub(areas.header.height),
        );
        log::log_view(model, frame, body);
    } else if model.events.is_some() {
        let body = Rect::new(
            0,
            areas.header.height,
            size.width,
            areas.status.y.saturating_sub(areas.header.height),
        );
        events_view(model, frame, body);
    }
    status_line(model, frame, areas.status);
    if let Some(dialog) = &model.dialog {
        dialog_view(model, dialog, frame, size);
    } else if let Some(chooser) = &model.chooser {
        chooser_view(model, chooser, frame, size);
    }
    if model.help {
        help(model, frame, size);
    } else if model.status_whole {
        last_message(model, frame, size);
    }
}
