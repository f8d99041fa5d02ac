// Package codec reads and writes frames of the Pulsar binary protocol, the
// protocol Meridian brokers speak so that the unmodified pulsar-client-go is
// their client. It is pure: no sockets, goroutines, clocks or logs. The
// broker's connection code owns the socket and decides what each frame
// means; the messages themselves are in proto/pulsarpb.
//
// Wire layout (every integer big-endian):
//
//	simple command:  [totalSize u32][cmdSize u32][BaseCommand]
//	payload command: [totalSize u32][cmdSize u32][BaseCommand]
//	                 ([0x0e02 u16][size u32][BrokerEntryMetadata])?   broker → consumer only
//	                 [0x0e01 u16][crc32c u32][metaSize u32][MessageMetadata][payload]
//
// totalSize counts every byte after itself; the CRC32C (Castagnoli) covers
// every byte after the checksum field. The part from the 0x0e01 magic on is
// what a producer wrote; the broker stores it verbatim and sends it back
// byte-identical in MESSAGE frames, so the checksum travels end to end.
//
// A connection's read side, step by step:
//
//  1. NewDecoder(conn, maxFrameSize), and until the peer is known (before
//     CONNECTED) SetLimit(a CONNECT's worth, RefuseOversize): a larger
//     frame is then ErrFrameRefused with none of its body read. Once
//     CONNECTED, SetLimit(the max_message_size announced in CONNECTED +
//     FramePadding, SkipOversize) (DefaultMaxFrameSize for the client's
//     default 5 MiB). SetBudget shares one bound on the bytes being read
//     among connections.
//  2. Loop on Next. On ErrFrameTooLarge the oversized frame has been skipped
//     and Frame.Cmd holds its command when it could be read, so the broker
//     can answer (SEND_ERROR for a SEND) or close, as it chooses. On
//     ErrUnknownCommand the frame has been consumed; ignore it or close. On
//     any other error (ErrMalformed, a read error, io.EOF) close the
//     connection: the stream position is no longer trustworthy.
//  3. For SEND, check the payload with VerifyChecksum (or ParseMessage to
//     read the metadata too) before storing it; a mismatch is answered with
//     SEND_ERROR ChecksumError, not by closing.
//  4. Switch on Frame.Cmd.GetType(). Types the broker does not serve
//     (transactions, topic watchers) decode with their body left in unknown
//     fields; answer them with an ERROR for their request id or ignore them.
//
// The write side builds replies with the helpers in commands.go and frames
// them with AppendCommand, or AppendPayloadCommand for MESSAGE. Never send
// REACHED_END_OF_TOPIC (or any type not listed in the reference) to
// pulsar-client-go v0.19.0: it closes the connection on types it does not
// handle. Failures map to ServerError codes through the one table in
// errors.go, which says how the client reacts to each.
package codec
