//! Fresh upload ids: the clock and random bits that make the unique part
//! of every data object's and page's key (the form is
//! `manifest::layout::UploadId`'s).

use manifest::layout::UploadId;

/// A fresh upload id: milliseconds since the epoch and 64 random bits,
/// in hex, so ids sort roughly by time and never repeat.
pub fn fresh() -> UploadId {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut random = [0u8; 8];
    // Without /dev/urandom, the clock, the process id and a counter
    // below still make ids differ.
    let urandom = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut random));
    if urandom.is_err() {
        random = [0u8; 8];
    }
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let r = u64::from_le_bytes(random)
        ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (std::process::id() as u64) << 32;
    UploadId::from_parts(ms, r)
}

/// A fresh upload id as a string ([`fresh`]).
pub fn fresh_string() -> String {
    fresh().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_id_gives_back_its_upload_time_and_never_repeats() {
        let now = fresh().time_ms().expect("a time");
        assert!(now > 1_700_000_000_000);
        assert_ne!(fresh(), fresh());
        assert!(fresh_string() != fresh_string());
        assert!(UploadId::parse(&fresh_string()).is_ok());
    }
}
