#if canImport(Glibc)
import Glibc
#endif

/// A thread of our own (a pthread) running one closure: the create, hand-over and join steps
/// every long-lived thread here needs, written once.
public struct OSThread: Sendable {
    private let handle: pthread_t

    /// The closure, handed to the new thread with one retain that the thread takes back.
    private final class Body {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    /// Starts `body` on a new thread, which keeps what the closure captures alive until it returns.
    /// A `detached` thread is never joined; its resources go when it ends.
    /// - Returns: the thread, or the `pthread_create` error number.
    public static func start(detached: Bool = false, _ body: @escaping @Sendable () -> Void) -> Result<OSThread, OSThreadError> {
        let context = Unmanaged.passRetained(Body(body)).toOpaque()
        var attributes = pthread_attr_t()
        pthread_attr_init(&attributes)
        defer { pthread_attr_destroy(&attributes) }
        if detached { pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED)) }
        var handle = pthread_t()
        let status = pthread_create(&handle, &attributes, { raw in
            Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, context)
        guard status == 0 else {
            Unmanaged<Body>.fromOpaque(context).release()
            return .failure(OSThreadError(status: status))
        }
        return .success(OSThread(handle: handle))
    }

    /// Waits for the thread to end. Called on the thread itself (its own work stopping it), it
    /// detaches instead, as a thread cannot join itself. Call once, for a thread not `detached`.
    public func join() {
        if pthread_equal(handle, pthread_self()) != 0 {
            pthread_detach(handle)
        } else {
            pthread_join(handle, nil)
        }
    }
}

/// Why a thread could not start: `pthread_create`'s error number.
public struct OSThreadError: Error, Sendable, CustomStringConvertible {
    public let status: Int32
    public var description: String { "pthread_create: \(status)" }
}
