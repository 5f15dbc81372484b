//! The machine a trace is recorded on, as its Session chunk names it: the host name and the boot id,
//! so that traces and profiles gathered from a fleet say where and in which boot each was taken
//! (a pid or an address means something only within one boot of one host).

/// The host name (`uname -n`, of this UTS namespace) and the kernel's boot id (a UUID new at every
/// boot); empty where the kernel does not say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Machine {
    /// The host name.
    pub host: String,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: String,
}

impl Machine {
    /// This machine, now.
    pub fn this() -> Machine {
        let read = |path: &str| {
            std::fs::read_to_string(path)
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        Machine {
            host: read("/proc/sys/kernel/hostname"),
            boot_id: read("/proc/sys/kernel/random/boot_id"),
        }
    }
}
