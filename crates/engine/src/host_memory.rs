//! How much memory this host has, and how much of it this process may use: fields of
//! `/proc/meminfo`, and the limit of the process's control group (a container's).

/// The field `name` of `/proc/meminfo` (`MemTotal`, `MemAvailable`...), in bytes.
pub fn meminfo_bytes(name: &str) -> Option<u64> {
    field_bytes(&std::fs::read_to_string("/proc/meminfo").ok()?, name)
}

/// The field `name` of a `/proc/meminfo` text (`NAME:   KIB kB`), in bytes.
fn field_bytes(meminfo: &str, name: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The memory limit of this process's control group (v2 `memory.max`, v1
/// `memory.limit_in_bytes`), if it has one.
pub fn cgroup_limit() -> Option<u64> {
    let groups = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut files = Vec::new();
    for line in groups.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let path = path.trim_start_matches('/');
        if controllers.is_empty() {
            files.push(format!("/sys/fs/cgroup/{path}/memory.max"));
            files.push("/sys/fs/cgroup/memory.max".to_string());
        } else if controllers.split(',').any(|c| c == "memory") {
            files.push(format!(
                "/sys/fs/cgroup/memory/{path}/memory.limit_in_bytes"
            ));
            files.push("/sys/fs/cgroup/memory/memory.limit_in_bytes".to_string());
        }
    }
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .filter_map(|text| text.trim().parse::<u64>().ok())
        .min()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_are_read_in_bytes() {
        let info = "MemTotal:       24684092 kB\nMemFree:          899932 kB\n";
        assert_eq!(field_bytes(info, "MemTotal"), Some(24684092 * 1024));
        assert_eq!(field_bytes(info, "MemFree"), Some(899932 * 1024));
        assert_eq!(field_bytes(info, "Mem"), None);
        assert_eq!(field_bytes("MemTotal: lots kB\n", "MemTotal"), None);
        assert!(meminfo_bytes("MemTotal").is_some_and(|b| b > 0));
    }
}
