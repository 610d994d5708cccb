# make release: syft's SPDX JSON, with the two fields syft v1.57.2 makes up on
# every run set from what the SBOM describes, so that one commit gives the same
# bytes every time (docs/RELEASE.md, "The SBOM"). syft has no option for them:
# it writes time.Now() and a random UUID (anchore/syft#3931).
#
#   jq -c --arg epoch "$SOURCE_DATE_EPOCH" -f hack/syft/reproducible.jq
#
# creationInfo.created: SOURCE_DATE_EPOCH, the commit's time, as RFC 3339 in
# UTC: the time every file and the config of the image carry.
# documentNamespace: syft's, its random UUID replaced by sha256-HEX, the digest
# of the platform's manifest that the document DESCRIBES. That manifest's
# config names the commit (org.opencontainers.image.revision), so one
# namespace is one commit's SBOM of one platform, as SPDX 2.3 asks (6.5).
# jq -c writes the compact JSON syft writes; only these two fields change.

def fail($why): error("reproducible.jq: \($why)");

((.relationships // [])
	| map(select(.spdxElementId == "SPDXRef-DOCUMENT" and .relationshipType == "DESCRIBES"))
	| if length == 1 then .[0].relatedSpdxElement else fail("want one package the document DESCRIBES, have \(length)") end
) as $root
| ([.packages[] | select(.SPDXID == $root) | .checksums[]? | select(.algorithm == "SHA256") | .checksumValue]
	| if length == 1 and (.[0] | test("^[0-9a-f]{64}$")) then .[0] else fail("\($root): want one SHA256 checksum, have \(.)") end
) as $digest
| ($epoch | if test("^[0-9]+$") then tonumber | todate else fail("SOURCE_DATE_EPOCH \(.): want seconds since 1970") end) as $created
| .creationInfo.created = $created
| .documentNamespace |= (
	"-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$" as $uuid
	| if test($uuid) then sub($uuid; "-sha256-" + $digest) else fail("documentNamespace \(.): no UUID at its end") end
)
