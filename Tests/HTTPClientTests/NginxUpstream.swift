import Foundation
import Glibc
import PushWardenTestSupport

/// An nginx on 127.0.0.1 speaking TLS with HTTP/2 (ALPN h2), with a throwaway self-signed
/// certificate for 127.0.0.1, for the tests that need a real TLS/HTTP/2 peer. Its access log
/// records nginx's connection serial number for every request, so tests can count connections.
final class NginxUpstream {
    static let executable = "/usr/sbin/nginx"

    let port: UInt16
    let directory: URL
    let certificatePath: String
    private let process: Process

    init() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("pw-nginx-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        certificatePath = directory.appendingPathComponent("cert.pem").path
        let keyPath = directory.appendingPathComponent("key.pem").path
        try Self.run("/usr/bin/openssl", [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", keyPath, "-out", certificatePath, "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
        ])
        port = UInt16(Loopback.unusedPort() ?? 0)
        let d = directory.path
        let config = """
            \(getuid() == 0 ? "user root;" : "")
            worker_processes 1;
            daemon off;
            pid \(d)/nginx.pid;
            error_log \(d)/error.log;
            events { worker_connections 1024; }
            http {
                log_format conn '$connection $server_protocol $request_method $status';
                access_log \(d)/access.log conn;
                client_body_temp_path \(d)/body;
                proxy_temp_path \(d)/proxy;
                fastcgi_temp_path \(d)/fastcgi;
                uwsgi_temp_path \(d)/uwsgi;
                scgi_temp_path \(d)/scgi;
                server {
                    listen 127.0.0.1:\(port) ssl http2;
                    ssl_certificate \(certificatePath);
                    ssl_certificate_key \(keyPath);
                    http2_max_concurrent_streams 256;
                    location / { return 200 "ok"; }
                }
            }
            """
        let configPath = directory.appendingPathComponent("nginx.conf").path
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = ["-p", d, "-c", configPath, "-e", "\(d)/error.log"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        try waitUntilListening()
    }

    /// (connection serial, protocol) for every logged request.
    func accessLog() throws -> [(connection: String, proto: String)] {
        let text = try String(contentsOf: directory.appendingPathComponent("access.log"), encoding: .utf8)
        return text.split(separator: "\n").map { line in
            let parts = line.split(separator: " ")
            return (String(parts[0]), String(parts[1]))
        }
    }

    func stop() {
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    private func waitUntilListening() throws {
        let deadline = Date().addingTimeInterval(5)
        while Date() < deadline {
            if let fd = Loopback.connect(port: Int(port)) {
                close(fd)
                return
            }
            guard process.isRunning else { break }
            usleep(20_000)
        }
        stop()
        throw POSIXError(.ECONNREFUSED)
    }

    private static func run(_ tool: String, _ arguments: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = arguments
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw POSIXError(.EIO) }
    }
}
