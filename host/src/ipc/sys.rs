//! The libc side of the fd exchange: seqpacket sockets in Linux's abstract namespace, socket
//! timeouts, the peer's credentials, and sending and receiving one datagram with fds attached
//! (`SCM_RIGHTS`).
//!
//! Thin wrappers that return [`io::Error`]s and own every fd they produce; what the bytes mean
//! is [`super::wire`]'s business, when to call them [`super::server`]'s and
//! [`super::client`]'s.

use std::ffi::c_int;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Control-message room for this many fds: more than are ever due, so extras are seen (and
/// closed) rather than silently truncated away.
pub(crate) const MAX_FDS_PER_MESSAGE: usize = 8;

pub(crate) fn owned_or_last_error(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        Err(io::Error::last_os_error())
    } else {
        // SAFETY: `fd` was just returned by a successful syscall and is owned by nobody else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

pub(crate) fn seqpacket_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket has no memory-safety preconditions; the result is checked.
    owned_or_last_error(unsafe {
        libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0)
    })
}

/// The address of abstract socket `name` and its exact length (no trailing NUL).
pub(crate) fn abstract_addr(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is a plain C struct; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket name {name:?} is too long"),
        ));
    }
    // sun_path[0] stays 0: the abstract namespace.
    for (dst, &src) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

pub(crate) fn bind_listener(name: &str) -> io::Result<OwnedFd> {
    let sock = seqpacket_socket()?;
    let (addr, len) = abstract_addr(name)?;
    // SAFETY: `addr` is a valid sockaddr_un of `len` bytes.
    if unsafe {
        libc::bind(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` is a bound socket.
    if unsafe { libc::listen(sock.as_raw_fd(), 128) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

pub(crate) fn set_timeouts(sock: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    // A zero timeval would mean "forever".
    let t = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    for opt in [libc::SO_RCVTIMEO, libc::SO_SNDTIMEO] {
        // SAFETY: `tv` is a valid timeval and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&tv as *const libc::timeval).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(crate) fn peer_credentials(sock: BorrowedFd<'_>) -> io::Result<libc::ucred> {
    // SAFETY: ucred is a plain C struct; all-zero is valid.
    let mut cred: libc::ucred = unsafe { zeroed() };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid out-pointers sized for SO_PEERCRED.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 128]);

const fn cmsg_space(n_fds: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic on its argument.
    unsafe { libc::CMSG_SPACE((n_fds * size_of::<c_int>()) as u32) as usize }
}

const _: () = assert!(cmsg_space(MAX_FDS_PER_MESSAGE) <= 128);

/// Sends one datagram with `fds` attached (none if empty).
pub(crate) fn send_with_fds(
    sock: BorrowedFd<'_>,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_MESSAGE {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "too many fds"));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = CmsgBuf([0; 128]);
    // SAFETY: msghdr is a plain C struct; all-zero is valid (no name, no control).
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = cmsg_space(fds.len()) as _;
        // SAFETY: the control buffer is aligned and at least CMSG_SPACE(fds) bytes long (checked
        // at compile time), so the first header and its data fit inside it.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN((fds.len() * size_of::<c_int>()) as u32) as _;
            let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` and `control`, which outlive the call; the data is
        // only read.
        let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if sent as usize != data.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "short send"));
        }
        return Ok(());
    }
}

/// What one `recvmsg` delivered: the bytes copied, the message flags, and every fd that came
/// with it (owned, so dropping closes them).
pub(crate) struct Received {
    pub(crate) len: usize,
    pub(crate) flags: c_int,
    pub(crate) fds: Vec<OwnedFd>,
}

impl Received {
    /// The payload if the datagram was not truncated.
    pub(crate) fn payload<'b>(&self, buf: &'b [u8]) -> Option<&'b [u8]> {
        (self.flags & libc::MSG_TRUNC == 0).then(|| &buf[..self.len.min(buf.len())])
    }

    pub(crate) fn describe_len(&self) -> String {
        if self.flags & libc::MSG_TRUNC != 0 {
            format!("more than {}", self.len)
        } else {
            self.len.to_string()
        }
    }
}

pub(crate) fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Received> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut control = CmsgBuf([0; 128]);
    // SAFETY: msghdr is a plain C struct; all-zero is valid.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = cmsg_space(MAX_FDS_PER_MESSAGE) as _;
    let len = loop {
        // SAFETY: `msg` points at `iov` (over `buf`) and `control`, both live and writable for
        // the stated lengths.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `control` with `msg.msg_controllen` bytes of well-formed control
    // messages; CMSG_FIRSTHDR/NXTHDR stay inside that length, and each SCM_RIGHTS payload is
    // an array of fds that now belong to this process (taken into OwnedFd exactly once).
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let header = libc::CMSG_LEN(0) as usize;
                let n = ((*cmsg).cmsg_len as usize).saturating_sub(header) / size_of::<c_int>();
                let data = libc::CMSG_DATA(cmsg).cast::<c_int>();
                for i in 0..n {
                    let fd = data.add(i).read_unaligned();
                    if fd >= 0 {
                        fds.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len,
        flags: msg.msg_flags,
        fds,
    })
}
