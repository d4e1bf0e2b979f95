import ClientAPI
import PWCore
import PWPolicy
import Testing

/// Endpoint URLs as a registration carries them, so the table also proves the wiring.
private func register(_ url: String) -> ContractError? {
    let body = edited(webBody, [("push_token", .string(url))])
    return refusal { try RequestValidator.installation(body: bytes(body), policy: allPlatforms, contactID: session) }
}

@Suite struct EndpointHosts {
    @Test(arguments: [
        "https://fcm.googleapis.com/fcm/send/eXaMpLe:APA91bGZ",
        "https://updates.push.services.mozilla.com/wpush/v2/gAAAAABk",
        "https://web.push.apple.com/QGuQyavXutnMeR6ROuQWmj",
        "https://wns2-par02p.notify.windows.com/w/?token=BQYAAAD",
        "https://ntfy.sh/upAbC123?up=1",
        "https://push.example.com",
        "https://push.example.com.",
        "https://push.example.com./x",
        "HTTPS://PUSH.EXAMPLE.COM:443/Path",
        "https://my_host.example.org:8443/x",
        "https://xn--bcher-kva.de/x",
        "https://8.8.8.8/push",
        "https://1.1.1.1:8443/",
        "https://[2001:4860:4860::8888]/push",
        "https://[2606:4700:4700::1111]:8443/x",
        "https://[2a00:1450:4001:82b::200e]/",
        "https://[64:ff9b::808:808]/",
        "https://[64:ff9b::8.8.8.8]/",
        "https://[2002:808:808::1]/",
        "https://localhost.example.com/",
        "https://local.example.com/",
        "https://10.0.0.1.example.com/",
    ])
    func publicHostsPass(url: String) {
        #expect(register(url) == nil)
    }

    @Test(arguments: [
        // IPv4 loopback in every spelling inet_aton accepts
        "https://127.0.0.1/", "https://127.0.0.1:443/x", "https://127.1/", "https://127.0.1/", "https://2130706433/",
        "https://0177.0.0.1/", "https://0177.1/", "https://0x7f.1/", "https://0x7f000001/", "https://0X7F.0.0.1/",
        "https://017700000001/", "https://127.0.0.1./", "https://127.255.255.254/", "https://0x7f.0x0.0x0.0x1/",
        // unspecified, private, shared, link-local (cloud metadata), documentation, benchmarking, multicast, reserved
        "https://0.0.0.0/", "https://0/", "https://0x0/", "https://10.0.0.1/", "https://012.0.0.1/", "https://167772161/",
        "https://010.0.0.1/", "https://172.16.5.4/", "https://172.31.255.255/", "https://192.168.1.1/", "https://0xc0a80101/",
        "https://3232235777/", "https://192.168.257/", "https://169.254.169.254/latest/meta-data", "https://0xa9fea9fe/",
        "https://2852039166/", "https://100.64.0.1/", "https://100.127.255.255/", "https://192.0.0.8/", "https://192.0.2.1/",
        "https://198.51.100.7/", "https://203.0.113.9/", "https://198.18.0.1/", "https://198.19.255.255/", "https://224.0.0.1/",
        "https://239.255.255.250/", "https://240.0.0.1/", "https://255.255.255.255/", "https://4294967295/",
        // IPv6: loopback, unspecified, mapped, compatible, NAT64 with private v4, ULA, link-local, site-local, multicast
        "https://[::1]/", "https://[::]/", "https://[0:0:0:0:0:0:0:1]/", "https://[0000:0000:0000:0000:0000:0000:0000:0001]/",
        "https://[::ffff:127.0.0.1]/", "https://[::ffff:7f00:1]/", "https://[::FFFF:7F00:1]/", "https://[::ffff:10.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/", "https://[::ffff:8.8.8.8]/", "https://[0:0:0:0:0:ffff:127.0.0.1]/", "https://[::127.0.0.1]/",
        "https://[::7f00:1]/", "https://[64:ff9b::127.0.0.1]/", "https://[64:ff9b::a00:1]/", "https://[64:ff9b::a9fe:a9fe]/",
        "https://[64:ff9b:1::1]/", "https://[fc00::1]/", "https://[fd12:3456:789a::1]/", "https://[fe80::1]/", "https://[febf::1]/",
        "https://[fec0::1]/", "https://[ff02::1]/", "https://[ff05::1:3]/", "https://[2001:db8::1]/", "https://[2001::1]/",
        "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "https://[2001:10::1]/", "https://[2002:7f00:1::]/",
        "https://[2002:c0a8:101::1]/", "https://[100::1]/", "https://[3fff::1]/", "https://[5f00::1]/", "https://[::1]:8443/",
        // local names
        "https://localhost/", "https://LOCALHOST/", "https://localhost./", "https://localhost:8443/", "https://foo.localhost/",
        "https://a.b.localhost./", "https://printer.local/", "https://metadata.google.internal/computeMetadata/v1/",
        "https://router.home.arpa/", "https://intranet/", "https://myservice/", "https://kubernetes/", "https://foo.test/",
        "https://x.lan/", "https://db.corp/", "https://host.localdomain/", "https://abc.onion/", "https://1.0.0.127.in-addr.arpa/",
    ])
    func privateHostsAreNotPubliclyRoutable(url: String) {
        let e = register(url)
        #expect(e?.code == .urlNotPubliclyRoutable)
        #expect(e?.field == "push_token")
        #expect(e?.status == 400)
    }

    @Test(arguments: [
        "http://push.example.com/", "ftp://push.example.com/", "wss://push.example.com/", "https:push.example.com/x",
        "https:/push.example.com/x", "https:///push.example.com/x", "https://", "https:///", "https://:443/",
        "https://user:pass@push.example.com/", "https://push.example.com@127.0.0.1/", "https://@push.example.com/",
        "https://%6c%6fcalhost/", "https://push%2eexample.com/", "https://[fe80::1%25eth0]/", "https://push.example.com/#frag",
        "https://push example.com/", "https://push.example.com\\@evil.com/", "https://push.example.com/\t",
        "https://push.exämple.com/", "https://[::1/", "https://[::1]x/", "https://[::1]:/", "https://[1::2::3]/",
        "https://[1:2:3:4:5:6:7:8:9]/", "https://[12345::1]/", "https://[::ffff:127.0.0.01]/", "https://[g::1]/",
        "https://push.example.com:0/", "https://push.example.com:99999/", "https://push.example.com:/",
        "https://push.example.com:44a/", "https://1.2.3.4.5/", "https://256.1.1.1/", "https://1.2.3.256/", "https://08.8.8.8/",
        "https://0x08.8.8.8/", "https://134744072/", "https://8.8.2056/", "https://a..b.com/", "https://.example.com/",
        "https://push.example.com../", "https://pu$h.example.com/", "https://[2001:4860:4860::8888/",
        "https://" + String(repeating: "a", count: 64) + ".example.com/",
        "https://push.example.com/" + String(repeating: "p", count: 1000),
    ])
    func malformedURLsAreInvalidWebPush(url: String) {
        let e = register(url)
        #expect(e?.code == .invalidWebPush)
        #expect(e?.field == "push_token")
    }

    @Test func exactlyOneThousandCharactersIsAccepted() throws {
        let prefix = "https://push.example.com/"
        let url = prefix + String(repeating: "p", count: 1000 - prefix.count)
        #expect(url.count == 1000)
        #expect(register(url) == nil)
        #expect(register(url + "p")?.code == .invalidWebPush)
    }

    @Test(arguments: [
        ("8.8.8.8", true), ("93.184.215.14", true), ("2606:4700:4700::1111", true), ("64:ff9b::808:808", true),
        ("127.0.0.1", false), ("10.1.2.3", false), ("169.254.169.254", false), ("100.64.1.1", false), ("0.0.0.0", false),
        ("::1", false), ("::ffff:127.0.0.1", false), ("fe80::1", false), ("fd00::1", false), ("64:ff9b::a00:1", false),
        ("0177.0.0.1", false), ("2130706433", false), ("localhost", false), ("", false), ("[::1]", false),
    ])
    func resolvedAddressCheck(address: String, routable: Bool) {
        #expect(EndpointURL.isPubliclyRoutable(address: address) == routable)
    }

    @Test func validatorIsUsableOnItsOwn() {
        #expect(refusal { try EndpointURL.validate("https://[::1]/", field: "endpoint") }?.field == "endpoint")
        #expect(refusal { try EndpointURL.validate("https://push.example.com/", field: "endpoint") } == nil)
    }
}
