//! The `recipe` binary's allocator and its setting (`recipes/src/main.rs`), shared by the
//! benches that time training steps: glibc's allocator returns the large per-op buffers to the
//! kernel and page-faults them in again every step, and mimalloc at its default purge delay
//! does the same a second later (ResNet-50's forward + backward spent 47 % of its samples in the
//! kernel's `clear_page` without the setting below).

/// mimalloc as the process's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (index 15 of `mi_option_e`, not named by
/// libmimalloc-sys), as in `recipes/src/main.rs`.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keeps freed memory mapped for reuse (purge delay −1), as the `recipe` binary does, unless
/// `MIMALLOC_PURGE_DELAY` in the environment says otherwise.
pub fn keep_freed_pages() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of mimalloc's options by its index; no pointer is involved.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
    }
}
