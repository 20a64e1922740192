//! `gaspi_printf` and `gaspi_printf_to`: C-variadic, so written in C (`printf.c`); these
//! exported entry points jump there with every register and the stack untouched (a cdylib
//! exports only symbols defined in Rust).

// SAFETY: both are defined in printf.c with C linkage; they are only jumped to, never called
// from Rust, so their (variadic) signatures are the C caller's business.
unsafe extern "C" {
    fn tiers_gaspi_printf_c();
    fn tiers_gaspi_printf_to_c();
}

/// `gaspi_printf(fmt, ...)`: prints `rank: message` on stdout.
///
/// # Safety
/// As C's `printf`: `fmt` and the arguments must match. The jump leaves registers and stack
/// exactly as the caller set them for the C function.
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gaspi_printf() {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("jmp {0}", sym tiers_gaspi_printf_c);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("b {0}", sym tiers_gaspi_printf_c);
}

/// `gaspi_printf_to(rank, fmt, ...)`: prints only at `rank`.
///
/// # Safety
/// As [`gaspi_printf`].
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn gaspi_printf_to() {
    #[cfg(target_arch = "x86_64")]
    core::arch::naked_asm!("jmp {0}", sym tiers_gaspi_printf_to_c);
    #[cfg(target_arch = "aarch64")]
    core::arch::naked_asm!("b {0}", sym tiers_gaspi_printf_to_c);
}
