//! What one API call answered, classified without IO: the value, "not
//! configured" (S3's `NoSuch...`/`...NotFound...` codes for an unset
//! bucket setting), "not supported by this endpoint", denied, or another
//! failure. The rules in [`crate::rules`] take [`Answer`]s, so they are
//! tested on canned answers.
//!
//! Invariants: [`classify`] is pure (HTTP status and error code in); a code
//! it does not know is [`Answer::Failed`] with the text, never a guess.

/// An API call's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<T> {
    /// The call answered with a value.
    Ok(T),
    /// The setting is not configured (e.g.
    /// `ServerSideEncryptionConfigurationNotFoundError`).
    Absent(String),
    /// The endpoint does not implement the call (`NotImplemented`, 501).
    Unsupported(String),
    /// The credentials may not make the call (403).
    Denied(String),
    /// Anything else (the error's text).
    Failed(String),
}

impl<T> Answer<T> {
    /// Applies `f` to the value.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Answer<U> {
        match self {
            Answer::Ok(v) => Answer::Ok(f(v)),
            Answer::Absent(s) => Answer::Absent(s),
            Answer::Unsupported(s) => Answer::Unsupported(s),
            Answer::Denied(s) => Answer::Denied(s),
            Answer::Failed(s) => Answer::Failed(s),
        }
    }

    /// The error kind's text, or `None` for a value.
    pub fn error_text(&self) -> Option<&str> {
        match self {
            Answer::Ok(_) => None,
            Answer::Absent(s) | Answer::Unsupported(s) | Answer::Denied(s) | Answer::Failed(s) => {
                Some(s)
            }
        }
    }
}

/// How an error answer is classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The setting is not configured.
    Absent,
    /// The endpoint does not implement the call.
    Unsupported,
    /// Access denied.
    Denied,
    /// The bucket does not exist.
    NoSuchBucket,
    /// Anything else.
    Other,
}

/// Classifies an error answer by its HTTP status (if any) and S3 error
/// code (if any).
pub fn classify(status: Option<u16>, code: Option<&str>) -> ErrorKind {
    match code {
        Some("NoSuchBucket") => return ErrorKind::NoSuchBucket,
        Some("NotImplemented") | Some("MethodNotAllowed") | Some("UnsupportedOperation") => {
            return ErrorKind::Unsupported;
        }
        Some("AccessDenied")
        | Some("AllAccessDisabled")
        | Some("InvalidAccessKeyId")
        | Some("SignatureDoesNotMatch") => return ErrorKind::Denied,
        Some(c)
            if (c.starts_with("NoSuch") && c != "NoSuchKey")
                || c.contains("ConfigurationNotFound")
                || c.ends_with("NotFoundError") =>
        {
            return ErrorKind::Absent;
        }
        _ => {}
    }
    match status {
        Some(501) | Some(405) => ErrorKind::Unsupported,
        Some(403) => ErrorKind::Denied,
        _ => ErrorKind::Other,
    }
}

/// An [`Answer`] from an error's status, code and text.
pub fn answer_of_error<T>(status: Option<u16>, code: Option<&str>, text: String) -> Answer<T> {
    match classify(status, code) {
        ErrorKind::Absent => Answer::Absent(text),
        ErrorKind::Unsupported => Answer::Unsupported(text),
        ErrorKind::Denied => Answer::Denied(text),
        ErrorKind::NoSuchBucket | ErrorKind::Other => Answer::Failed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_error_codes_are_classified() {
        let table: &[(Option<u16>, Option<&str>, ErrorKind)] = &[
            (
                Some(404),
                Some("ServerSideEncryptionConfigurationNotFoundError"),
                ErrorKind::Absent,
            ),
            (
                Some(404),
                Some("NoSuchPublicAccessBlockConfiguration"),
                ErrorKind::Absent,
            ),
            (Some(404), Some("NoSuchBucketPolicy"), ErrorKind::Absent),
            (
                Some(404),
                Some("NoSuchLifecycleConfiguration"),
                ErrorKind::Absent,
            ),
            (
                Some(404),
                Some("ReplicationConfigurationNotFoundError"),
                ErrorKind::Absent,
            ),
            (
                Some(404),
                Some("ObjectLockConfigurationNotFoundError"),
                ErrorKind::Absent,
            ),
            (Some(404), Some("NoSuchBucket"), ErrorKind::NoSuchBucket),
            (Some(404), Some("NoSuchKey"), ErrorKind::Other),
            (Some(501), Some("NotImplemented"), ErrorKind::Unsupported),
            (Some(501), None, ErrorKind::Unsupported),
            (Some(403), Some("AccessDenied"), ErrorKind::Denied),
            (Some(403), None, ErrorKind::Denied),
            (Some(500), Some("InternalError"), ErrorKind::Other),
            (None, None, ErrorKind::Other),
        ];
        for (status, code, want) in table {
            assert_eq!(classify(*status, *code), *want, "{status:?} {code:?}");
        }
    }
}
