//! NOTIFICATION (RFC 4271 §4.5) and the error codes of RFC 4271 §6,
//! RFC 4486 (Cease subcodes), RFC 6608 (FSM subcodes), RFC 7313
//! (ROUTE-REFRESH) and RFC 9003 (shutdown communication).
//!
//! A NOTIFICATION is `code`, `subcode` and opaque `data`; what the data
//! holds is fixed per error by the RFCs (the bad length, the bad type, the
//! largest supported version, the missing attribute's type, the malformed
//! attribute ...). The constructors here build exactly those.

/// Error codes (RFC 4271 §4.5, RFC 7313).
pub mod code {
    pub const MESSAGE_HEADER: u8 = 1;
    pub const OPEN_MESSAGE: u8 = 2;
    pub const UPDATE_MESSAGE: u8 = 3;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM: u8 = 5;
    pub const CEASE: u8 = 6;
    pub const ROUTE_REFRESH: u8 = 7;
}

/// Message Header Error subcodes (RFC 4271 §6.1).
pub mod header {
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    pub const BAD_MESSAGE_TYPE: u8 = 3;
}

/// OPEN Message Error subcodes (RFC 4271 §6.2, RFC 5492).
pub mod open {
    pub const UNSPECIFIC: u8 = 0;
    pub const UNSUPPORTED_VERSION: u8 = 1;
    pub const BAD_PEER_AS: u8 = 2;
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
}

/// UPDATE Message Error subcodes (RFC 4271 §6.3).
pub mod update {
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    pub const UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE: u8 = 2;
    pub const MISSING_WELL_KNOWN_ATTRIBUTE: u8 = 3;
    pub const ATTRIBUTE_FLAGS_ERROR: u8 = 4;
    pub const ATTRIBUTE_LENGTH_ERROR: u8 = 5;
    pub const INVALID_ORIGIN: u8 = 6;
    pub const INVALID_NEXT_HOP: u8 = 8;
    pub const OPTIONAL_ATTRIBUTE_ERROR: u8 = 9;
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    pub const MALFORMED_AS_PATH: u8 = 11;
}

/// Finite State Machine Error subcodes (RFC 6608).
pub mod fsm {
    pub const UNSPECIFIED: u8 = 0;
    pub const UNEXPECTED_IN_OPENSENT: u8 = 1;
    pub const UNEXPECTED_IN_OPENCONFIRM: u8 = 2;
    pub const UNEXPECTED_IN_ESTABLISHED: u8 = 3;
}

/// Cease subcodes (RFC 4486).
pub mod cease {
    pub const MAX_PREFIXES: u8 = 1;
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    pub const PEER_DECONFIGURED: u8 = 3;
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    pub const CONNECTION_REJECTED: u8 = 5;
    pub const OTHER_CONFIGURATION_CHANGE: u8 = 6;
    pub const CONNECTION_COLLISION: u8 = 7;
    pub const OUT_OF_RESOURCES: u8 = 8;
}

/// ROUTE-REFRESH Message Error subcodes (RFC 7313).
pub mod route_refresh {
    pub const INVALID_MESSAGE_LENGTH: u8 = 1;
}

/// Longest shutdown communication (RFC 9003 §2).
pub const MAX_SHUTDOWN_MESSAGE_LEN: usize = 255;

/// A NOTIFICATION message: the error, and the data the RFC prescribes for it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Notification {
    pub code: u8,
    pub subcode: u8,
    pub data: Vec<u8>,
}

impl Notification {
    pub fn new(code: u8, subcode: u8, data: Vec<u8>) -> Self {
        Notification {
            code,
            subcode,
            data,
        }
    }

    /// Hold Timer Expired (code 4, subcode 0).
    pub fn hold_timer_expired() -> Self {
        Self::new(code::HOLD_TIMER_EXPIRED, 0, Vec::new())
    }

    /// A Cease with `subcode`; for Administrative Shutdown and Reset the
    /// `message` is sent as the RFC 9003 shutdown communication (cut at a
    /// character boundary to 255 bytes), ignored for the other subcodes.
    pub fn cease(subcode: u8, message: &str) -> Self {
        let mut data = Vec::new();
        if matches!(
            subcode,
            cease::ADMINISTRATIVE_SHUTDOWN | cease::ADMINISTRATIVE_RESET
        ) && !message.is_empty()
        {
            let mut end = message.len().min(MAX_SHUTDOWN_MESSAGE_LEN);
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            data.push(end as u8);
            data.extend_from_slice(&message.as_bytes()[..end]);
        }
        Self::new(code::CEASE, subcode, data)
    }

    /// An FSM error for a message that the state `state_subcode` (one of
    /// [`fsm`]) does not expect.
    pub fn fsm(state_subcode: u8) -> Self {
        Self::new(code::FSM, state_subcode, Vec::new())
    }

    /// The RFC 9003 shutdown communication of a Cease, if it carries one
    /// that is well-formed UTF-8.
    pub fn shutdown_message(&self) -> Option<&str> {
        if self.code != code::CEASE
            || !matches!(
                self.subcode,
                cease::ADMINISTRATIVE_SHUTDOWN | cease::ADMINISTRATIVE_RESET
            )
        {
            return None;
        }
        let (&len, rest) = self.data.split_first()?;
        let text = rest.get(..usize::from(len))?;
        std::str::from_utf8(text).ok()
    }

    /// Decodes the body of a NOTIFICATION (after the 19-byte header); the
    /// caller has checked it is at least 2 bytes long.
    pub(crate) fn parse(body: &[u8]) -> Option<Self> {
        let (&code, rest) = body.split_first()?;
        let (&subcode, data) = rest.split_first()?;
        Some(Self::new(code, subcode, data.to_vec()))
    }

    pub(crate) fn emit_body(&self, out: &mut Vec<u8>) {
        out.push(self.code);
        out.push(self.subcode);
        out.extend_from_slice(&self.data);
    }

    /// "OPEN Message Error / Bad Peer AS" and the like, for log lines.
    pub fn describe(&self) -> String {
        let (code_name, sub_name) = names(self.code, self.subcode);
        let mut text = match sub_name {
            Some("") => code_name.to_string(),
            Some(sub) => format!("{code_name} / {sub}"),
            None => format!("{code_name} / subcode {}", self.subcode),
        };
        if let Some(msg) = self.shutdown_message() {
            text.push_str(&format!(": \"{msg}\""));
        }
        text
    }
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (code {}, subcode {})",
            self.describe(),
            self.code,
            self.subcode
        )
    }
}

fn names(code: u8, subcode: u8) -> (&'static str, Option<&'static str>) {
    match code {
        code::MESSAGE_HEADER => (
            "Message Header Error",
            match subcode {
                header::CONNECTION_NOT_SYNCHRONIZED => Some("Connection Not Synchronized"),
                header::BAD_MESSAGE_LENGTH => Some("Bad Message Length"),
                header::BAD_MESSAGE_TYPE => Some("Bad Message Type"),
                _ => None,
            },
        ),
        code::OPEN_MESSAGE => (
            "OPEN Message Error",
            match subcode {
                open::UNSPECIFIC => Some("Unspecific"),
                open::UNSUPPORTED_VERSION => Some("Unsupported Version Number"),
                open::BAD_PEER_AS => Some("Bad Peer AS"),
                open::BAD_BGP_IDENTIFIER => Some("Bad BGP Identifier"),
                open::UNSUPPORTED_OPTIONAL_PARAMETER => Some("Unsupported Optional Parameter"),
                open::UNACCEPTABLE_HOLD_TIME => Some("Unacceptable Hold Time"),
                open::UNSUPPORTED_CAPABILITY => Some("Unsupported Capability"),
                _ => None,
            },
        ),
        code::UPDATE_MESSAGE => (
            "UPDATE Message Error",
            match subcode {
                update::MALFORMED_ATTRIBUTE_LIST => Some("Malformed Attribute List"),
                update::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE => {
                    Some("Unrecognized Well-known Attribute")
                }
                update::MISSING_WELL_KNOWN_ATTRIBUTE => Some("Missing Well-known Attribute"),
                update::ATTRIBUTE_FLAGS_ERROR => Some("Attribute Flags Error"),
                update::ATTRIBUTE_LENGTH_ERROR => Some("Attribute Length Error"),
                update::INVALID_ORIGIN => Some("Invalid ORIGIN Attribute"),
                update::INVALID_NEXT_HOP => Some("Invalid NEXT_HOP Attribute"),
                update::OPTIONAL_ATTRIBUTE_ERROR => Some("Optional Attribute Error"),
                update::INVALID_NETWORK_FIELD => Some("Invalid Network Field"),
                update::MALFORMED_AS_PATH => Some("Malformed AS_PATH"),
                _ => None,
            },
        ),
        code::HOLD_TIMER_EXPIRED => ("Hold Timer Expired", Some("")),
        code::FSM => (
            "Finite State Machine Error",
            match subcode {
                fsm::UNSPECIFIED => Some("Unspecified"),
                fsm::UNEXPECTED_IN_OPENSENT => Some("Unexpected Message in OpenSent"),
                fsm::UNEXPECTED_IN_OPENCONFIRM => Some("Unexpected Message in OpenConfirm"),
                fsm::UNEXPECTED_IN_ESTABLISHED => Some("Unexpected Message in Established"),
                _ => None,
            },
        ),
        code::CEASE => (
            "Cease",
            match subcode {
                cease::MAX_PREFIXES => Some("Maximum Number of Prefixes Reached"),
                cease::ADMINISTRATIVE_SHUTDOWN => Some("Administrative Shutdown"),
                cease::PEER_DECONFIGURED => Some("Peer De-configured"),
                cease::ADMINISTRATIVE_RESET => Some("Administrative Reset"),
                cease::CONNECTION_REJECTED => Some("Connection Rejected"),
                cease::OTHER_CONFIGURATION_CHANGE => Some("Other Configuration Change"),
                cease::CONNECTION_COLLISION => Some("Connection Collision Resolution"),
                cease::OUT_OF_RESOURCES => Some("Out of Resources"),
                _ => None,
            },
        ),
        code::ROUTE_REFRESH => (
            "ROUTE-REFRESH Message Error",
            match subcode {
                route_refresh::INVALID_MESSAGE_LENGTH => Some("Invalid Message Length"),
                _ => None,
            },
        ),
        _ => ("Unknown Error", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cease_carries_the_shutdown_communication() {
        let n = Notification::cease(cease::ADMINISTRATIVE_SHUTDOWN, "portico stopping");
        assert_eq!(n.data[0], 16);
        assert_eq!(n.shutdown_message(), Some("portico stopping"));
        assert_eq!(
            n.describe(),
            "Cease / Administrative Shutdown: \"portico stopping\""
        );
        // Cut at a character boundary, never more than 255 bytes.
        let long = "é".repeat(200);
        let n = Notification::cease(cease::ADMINISTRATIVE_RESET, &long);
        assert_eq!(usize::from(n.data[0]), 254);
        assert!(n.shutdown_message().is_some());
        // Other subcodes carry no data.
        assert!(
            Notification::cease(cease::PEER_DECONFIGURED, "x")
                .data
                .is_empty()
        );
    }

    #[test]
    fn names_for_log_lines() {
        let n = Notification::new(code::OPEN_MESSAGE, open::BAD_PEER_AS, vec![]);
        assert_eq!(
            n.to_string(),
            "OPEN Message Error / Bad Peer AS (code 2, subcode 2)"
        );
        assert_eq!(
            Notification::new(9, 9, vec![]).describe(),
            "Unknown Error / subcode 9"
        );
    }
}
