//! Where everything goes on the screen, as a pure function of the terminal size and the model's
//! pane state. `view` draws into these areas and `update` uses the same areas to know what a
//! mouse click or a page key refers to, so the two can never disagree.

use ratatui::layout::Rect;

/// Lines the header takes at least: the status line, then dispatch-held or the watcher notice
/// (a long one wraps and takes more).
pub const HEADER_LINES: u16 = 2;
/// Below this many body lines the list and the detail do not share the screen: Enter opens
/// the detail full-size instead.
pub const SPLIT_MIN_BODY: u16 = 26;

/// The areas of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Areas {
    pub header: Rect,
    /// The action list, when shown.
    pub list: Option<Rect>,
    /// The detail pane, when shown.
    pub detail: Option<Rect>,
    /// The bottom line: key hints, the filter being typed, or a status message.
    pub status: Rect,
}

/// Splits a `width` x `height` screen. `zoomed` shows the detail alone; `header_lines` and
/// `status_lines` are what the header and the status line need (a banner or a message wraps
/// rather than being cut); the body keeps at least a third of the screen.
pub fn areas(width: u16, height: u16, zoomed: bool, header_lines: u16, status_lines: u16) -> Areas {
    let edges = (height / 3).max(HEADER_LINES + 1);
    let header_height = header_lines.max(HEADER_LINES).min(edges - 1).min(height);
    let status_lines = status_lines
        .max(1)
        .min(edges.saturating_sub(header_height).max(1));
    let header = Rect::new(0, 0, width, header_height);
    let status_y = height.saturating_sub(status_lines).max(header_height);
    let status = Rect::new(
        0,
        status_y,
        width,
        height.saturating_sub(status_y).min(status_lines),
    );
    let body_height = status_y.saturating_sub(header_height);
    let body = Rect::new(0, header_height, width, body_height);
    if zoomed {
        return Areas {
            header,
            list: None,
            detail: Some(body),
            status,
        };
    }
    if body_height >= SPLIT_MIN_BODY {
        let list_height = body_height * 11 / 20;
        Areas {
            header,
            list: Some(Rect::new(0, body.y, width, list_height)),
            detail: Some(Rect::new(
                0,
                body.y + list_height,
                width,
                body_height - list_height,
            )),
            status,
        }
    } else {
        Areas {
            header,
            list: Some(body),
            detail: None,
            status,
        }
    }
}

/// Lines of list rows inside the list area: its block has a top and a bottom border, and the
/// first line inside names the columns.
pub fn list_inner_height(list: Rect) -> usize {
    usize::from(list.height.saturating_sub(3))
}
