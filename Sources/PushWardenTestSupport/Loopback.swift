#if canImport(Glibc)
import Glibc
#endif

/// TCP sockets on 127.0.0.1 for tests and mocks: the bind-and-read-back and connect dance,
/// written once.
public enum Loopback {
    /// `127.0.0.1:port` as a socket address.
    public static func address(port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(truncatingIfNeeded: port).bigEndian
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        return address
    }

    /// A TCP socket bound to 127.0.0.1 on a port the kernel picks, listening when `backlog` is
    /// given, and that port; nil (errno set) when a call failed. The caller owns the descriptor.
    public static func bind(reuseAddress: Bool = false, listen backlog: Int32? = nil) -> (fd: Int32, port: Int)? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        if reuseAddress {
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        var address = address(port: 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound, backlog.map({ Glibc.listen(fd, $0) == 0 }) ?? true else {
            let saved = errno
            close(fd)
            errno = saved
            return nil
        }
        return (fd, Int(UInt16(bigEndian: address.sin_port)))
    }

    /// A loopback port nothing listens on: bound, read back, closed. Nil when no socket could be
    /// bound.
    public static func unusedPort() -> Int? {
        guard let (fd, port) = bind() else { return nil }
        close(fd)
        return port
    }

    /// A blocking socket connected to `127.0.0.1:port`, or nil (nothing listens, or a call failed).
    /// The caller owns the descriptor.
    public static func connect(port: Int) -> Int32? {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        var address = address(port: port)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            close(fd)
            return nil
        }
        return fd
    }
}
