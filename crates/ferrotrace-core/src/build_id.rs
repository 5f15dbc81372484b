//! The GNU build-id of an ELF object, from its notes as loaded in memory (a `PT_NOTE` segment): what
//! the runtime's allocation stacks and the embedded recorder's hosted front end write into Module
//! chunks, for the analysis to check the file it symbolizes against.

/// The GNU build-id among ELF `notes` (4-byte aligned: namesz, descsz, type, name, desc), if any and
/// whole.
///
/// ```
/// use ferrotrace_core::build_id::gnu_build_id;
/// let mut note = Vec::new();
/// for word in [4u32, 2, 3] {
///     note.extend_from_slice(&word.to_le_bytes());
/// }
/// note.extend_from_slice(b"GNU\0\xab\xcd\0\0");
/// assert_eq!(gnu_build_id(&note), Some(&[0xab, 0xcd][..]));
/// ```
pub fn gnu_build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let word = |b: &[u8], i: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(i..i + 4)?.try_into().ok()?) as usize)
    };
    while notes.len() >= 12 {
        let (namesz, descsz, kind) = (word(notes, 0)?, word(notes, 4)?, word(notes, 8)?);
        let name_end = 12 + namesz.next_multiple_of(4);
        let desc_end = name_end.checked_add(descsz.next_multiple_of(4))?;
        if desc_end > notes.len() {
            return None;
        }
        if kind == 3 && notes.get(12..12 + namesz) == Some(b"GNU\0") {
            return notes.get(name_end..name_end + descsz);
        }
        notes = &notes[desc_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::gnu_build_id;

    #[test]
    fn build_id_is_found_among_notes() {
        let mut notes = [0u8; 64];
        let mut len = 0;
        // An ABI tag note first, then the build-id.
        for (name, kind, desc) in [
            (&b"GNU\0"[..], 1u32, &[0u8, 0, 0, 0, 3, 0, 0, 0][..]),
            (b"GNU\0", 3, &[0xab, 0xcd, 0xef][..]),
        ] {
            for part in [
                &(name.len() as u32).to_le_bytes()[..],
                &(desc.len() as u32).to_le_bytes(),
                &kind.to_le_bytes(),
                name,
                desc,
            ] {
                notes[len..len + part.len()].copy_from_slice(part);
                len += part.len();
            }
            len = len.next_multiple_of(4);
        }
        assert_eq!(gnu_build_id(&notes[..len]), Some(&[0xab, 0xcd, 0xef][..]));
        // Cut in the middle of the second note: not whole.
        assert_eq!(gnu_build_id(&notes[..len - 4]), None);
        assert_eq!(gnu_build_id(&notes[..8]), None);
    }
}
