// go-interop: a client of the universe service built from the reference's
// own .proto files, checking every answer with the reference's own mssmt
// package (crates/server/tests/grpc/go_client.rs runs it; scripts/go-interop.sh
// builds it).
//
//	go-interop gen -seed N -universes U -leaves L   # the leaves, as JSON, on stdout
//	go-interop check -addr HOST:PORT -truth FILE    # sync as tapd does; a JSON report
//
// `gen` draws universes whose script and group keys are real secp256k1
// points (tapd's unmarshalLeafKey parses them), so that the data the server
// holds is data a tapd node would accept. `check` walks the server in the
// order tapd's syncer does (universe/syncer.go, rpcserver/universe_rpc_diff.go):
// Info, MultiverseRoot, AssetRoots page by page, QueryAssetRoots,
// AssetLeafKeys page by page, AssetLeaves, and QueryProof for every key.
// Each answer must equal what the reference's CompactedTree gives for the
// leaves of the truth file, and each inclusion proof must decode, decompress
// and verify with the reference's code against the roots served.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/btcsuite/btcd/btcec/v2"
	"github.com/btcsuite/btcd/btcec/v2/schnorr"
	"github.com/lightninglabs/taproot-assets/mssmt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"mssmt.test/go-interop/gen/taprpc"
	unirpc "mssmt.test/go-interop/gen/universerpc"
)

// Truth is what the server was given: every universe and its leaves.
type Truth struct {
	Universes []TruthUniverse `json:"universes"`
}

// TruthUniverse is one universe: an asset ID or a group key (x-only, hex)
// and a proof type ("issuance" or "transfer").
type TruthUniverse struct {
	AssetID   string      `json:"asset_id,omitempty"`
	GroupKey  string      `json:"group_key,omitempty"`
	ProofType string      `json:"proof_type"`
	Leaves    []TruthLeaf `json:"leaves"`
}

// TruthLeaf is one leaf: its key's parts, the asset it is of, its value
// (the proof bytes) and its amount. Amounts are decimal strings: JSON
// numbers lose bits above 2^53.
type TruthLeaf struct {
	Txid      string `json:"txid"` // internal byte order, hex
	Index     uint32 `json:"index"`
	ScriptKey string `json:"script_key"` // x-only, hex
	AssetID   string `json:"asset_id"`
	Proof     string `json:"proof"`
	Amount    string `json:"amount"` // the leaf's sum
	// A burn: a transfer leaf that sums its amount instead of 1
	// (tapd's universe.Leaf.SmtLeafNode).
	Burn bool `json:"burn,omitempty"`
}

// Report is what `check` prints: how much it checked, and every mismatch.
type Report struct {
	RuntimeID        int64    `json:"runtime_id"`
	Universes        int      `json:"universes"`
	RootPages        int      `json:"root_pages"`
	LeafKeys         int      `json:"leaf_keys"`
	LeafHashes       int      `json:"leaf_hashes"`
	Leaves           int      `json:"leaves"`
	Proofs           int      `json:"proofs"`
	MultiverseProofs int      `json:"multiverse_proofs"`
	MultiverseRoots  int      `json:"multiverse_roots"`
	Mismatches       []string `json:"mismatches"`
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go-interop gen|check ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = runGen(os.Args[2:])
	case "check":
		err = runCheck(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "go-interop:", err)
		os.Exit(1)
	}
}

// point returns the x-only bytes of a real public key drawn from rng.
func point(rng *rand.Rand) []byte {
	var scalar [32]byte
	rng.Read(scalar[:])
	priv, _ := btcec.PrivKeyFromBytes(scalar[:])
	return schnorr.SerializePubKey(priv.PubKey())
}

func runGen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	seed := fs.Int64("seed", 1, "random seed")
	universes := fs.Int("universes", 6, "universes per proof type")
	leaves := fs.Int("leaves", 40, "most leaves per universe")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rng := rand.New(rand.NewSource(*seed))
	var truth Truth
	for u := 0; u < 2*(*universes); u++ {
		proofType := "issuance"
		if u%2 == 1 {
			proofType = "transfer"
		}
		var uni TruthUniverse
		uni.ProofType = proofType
		grouped := u%3 == 0
		var ownID [32]byte
		rng.Read(ownID[:])
		if grouped {
			uni.GroupKey = hex.EncodeToString(point(rng))
		} else {
			uni.AssetID = hex.EncodeToString(ownID[:])
		}
		n := 1 + rng.Intn(*leaves)
		for i := 0; i < n; i++ {
			var txid [32]byte
			rng.Read(txid[:])
			assetID := ownID
			if grouped {
				// A group's universe holds several assets.
				rng.Read(assetID[:])
			}
			proof := make([]byte, 1+rng.Intn(300))
			rng.Read(proof)
			amount := uint64(1 + rng.Intn(1_000_000))
			if i == 0 && u == 0 {
				// A sum above i64::MAX: sums are u64 on the wire
				// (bit-cast into MerkleSumNode.root_sum).
				amount = 1<<63 + 12345
			}
			burn := proofType == "transfer" && i == 1
			if proofType == "transfer" && !burn {
				amount = 1
			}
			uni.Leaves = append(uni.Leaves, TruthLeaf{
				Txid:      hex.EncodeToString(txid[:]),
				Index:     uint32(rng.Intn(8)),
				ScriptKey: hex.EncodeToString(point(rng)),
				AssetID:   hex.EncodeToString(assetID[:]),
				Proof:     hex.EncodeToString(proof),
				Amount:    strconv.FormatUint(amount, 10),
				Burn:      burn,
			})
		}
		truth.Universes = append(truth.Universes, uni)
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", " ")
	return out.Encode(truth)
}

// checker holds the report and the truth's reference trees.
type checker struct {
	ctx    context.Context
	client unirpc.UniverseClient
	report Report
}

func (c *checker) fail(format string, args ...any) {
	c.report.Mismatches = append(c.report.Mismatches, fmt.Sprintf(format, args...))
}

// expected is one universe of the truth with its reference tree.
type expected struct {
	truth    TruthUniverse
	idBytes  [32]byte
	name     string // Identifier.String(): "<proof type>-<hex of the ID bytes>"
	tree     *mssmt.CompactedTree
	root     *mssmt.BranchNode
	leaves   map[[32]byte]*mssmt.LeafNode
	leafKeys map[[32]byte]TruthLeaf
}

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(fmt.Sprintf("truth file: bad hex %q: %v", s, err))
	}
	return b
}

// universeKey is tapd's BaseLeafKey.UniverseKey: sha256 of the outpoint as
// wire.WriteOutPoint writes it (txid, index little-endian) and the x-only
// script key (universe/interface.go).
func universeKey(txid []byte, index uint32, scriptKey []byte) [32]byte {
	h := sha256.New()
	h.Write(txid)
	var idx [4]byte
	binary.LittleEndian.PutUint32(idx[:], index)
	h.Write(idx[:])
	h.Write(scriptKey)
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

func buildExpected(ctx context.Context, t TruthUniverse) (*expected, error) {
	e := &expected{
		truth:    t,
		tree:     mssmt.NewCompactedTree(mssmt.NewDefaultStore()),
		leaves:   map[[32]byte]*mssmt.LeafNode{},
		leafKeys: map[[32]byte]TruthLeaf{},
	}
	if t.GroupKey != "" {
		// Identifier.Bytes: sha256 of the group key's x-only bytes.
		e.idBytes = sha256.Sum256(mustHex(t.GroupKey))
	} else {
		copy(e.idBytes[:], mustHex(t.AssetID))
	}
	e.name = fmt.Sprintf("%s-%x", t.ProofType, e.idBytes[:])
	for _, l := range t.Leaves {
		amount, err := strconv.ParseUint(l.Amount, 10, 64)
		if err != nil {
			return nil, err
		}
		key := universeKey(mustHex(l.Txid), l.Index, mustHex(l.ScriptKey))
		leaf := mssmt.NewLeafNode(mustHex(l.Proof), amount)
		if _, err := e.tree.Insert(ctx, key, leaf); err != nil {
			return nil, err
		}
		e.leaves[key] = leaf
		e.leafKeys[key] = l
	}
	root, err := e.tree.Root(ctx)
	if err != nil {
		return nil, err
	}
	e.root = root
	return e, nil
}

func (e *expected) rpcID() *unirpc.ID {
	id := &unirpc.ID{ProofType: unirpc.ProofType_PROOF_TYPE_ISSUANCE}
	if e.truth.ProofType == "transfer" {
		id.ProofType = unirpc.ProofType_PROOF_TYPE_TRANSFER
	}
	if e.truth.GroupKey != "" {
		id.Id = &unirpc.ID_GroupKey{GroupKey: mustHex(e.truth.GroupKey)}
	} else {
		id.Id = &unirpc.ID_AssetId{AssetId: mustHex(e.truth.AssetID)}
	}
	return id
}

// multiverseLeaf is tapd's upsertMultiverseLeafEntry: the universe root's
// hash as the value, 1 (issuance) or the root's sum (transfer) as the sum.
func (e *expected) multiverseLeaf() *mssmt.LeafNode {
	hash := e.root.NodeHash()
	sum := e.root.NodeSum()
	if e.truth.ProofType == "issuance" {
		sum = 1
	}
	return mssmt.NewLeafNode(hash[:], sum)
}

func sameNode(n *unirpc.MerkleSumNode, want mssmt.Node) bool {
	if n == nil {
		return false
	}
	hash := want.NodeHash()
	// tapd's unmarshalMerkleSumNode: uint64(root.RootSum).
	return bytes.Equal(n.RootHash, hash[:]) && uint64(n.RootSum) == want.NodeSum()
}

// parseLeafKey is tapd's unmarshalLeafKey (rpcserver.go): the outpoint from
// op_str ("<reversed txid hex>:<index>") or op, the script key parsed as a
// public key (33 bytes compressed or 32 x-only).
func parseLeafKey(k *unirpc.AssetKey) ([32]byte, error) {
	var txid []byte
	var index uint32
	switch op := k.GetOutpoint().(type) {
	case *unirpc.AssetKey_OpStr:
		parts := strings.Split(op.OpStr, ":")
		if len(parts) != 2 {
			return [32]byte{}, fmt.Errorf("op_str %q", op.OpStr)
		}
		h, err := hex.DecodeString(parts[0])
		if err != nil || len(h) != 32 {
			return [32]byte{}, fmt.Errorf("op_str txid %q", parts[0])
		}
		i, err := strconv.ParseUint(parts[1], 10, 32)
		if err != nil {
			return [32]byte{}, err
		}
		txid, index = reverse(h), uint32(i)
	case *unirpc.AssetKey_Op:
		h, err := hex.DecodeString(op.Op.HashStr)
		if err != nil || len(h) != 32 {
			return [32]byte{}, fmt.Errorf("op hash_str %q", op.Op.HashStr)
		}
		txid, index = reverse(h), uint32(op.Op.Index)
	default:
		return [32]byte{}, fmt.Errorf("no outpoint")
	}
	var keyBytes []byte
	switch sk := k.GetScriptKey().(type) {
	case *unirpc.AssetKey_ScriptKeyBytes:
		keyBytes = sk.ScriptKeyBytes
	case *unirpc.AssetKey_ScriptKeyStr:
		b, err := hex.DecodeString(sk.ScriptKeyStr)
		if err != nil {
			return [32]byte{}, err
		}
		keyBytes = b
	default:
		return [32]byte{}, fmt.Errorf("no script key")
	}
	var pub *btcec.PublicKey
	var err error
	switch len(keyBytes) {
	case 32:
		pub, err = schnorr.ParsePubKey(keyBytes)
	default:
		pub, err = btcec.ParsePubKey(keyBytes)
	}
	if err != nil {
		return [32]byte{}, fmt.Errorf("script key %x: %w", keyBytes, err)
	}
	return universeKey(txid, index, schnorr.SerializePubKey(pub)), nil
}

func reverse(b []byte) []byte {
	out := make([]byte, len(b))
	for i := range b {
		out[len(b)-1-i] = b[i]
	}
	return out
}

func encodeProof(p *mssmt.Proof) []byte {
	var buf bytes.Buffer
	if err := p.Compress().Encode(&buf); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// verifyCompressed decodes a compressed proof as tapd's FetchProofLeaf
// does and checks it with VerifyMerkleProof; it also returns whether the
// bytes equal the reference tree's own proof of the key.
func verifyCompressed(raw []byte, key [32]byte, leaf *mssmt.LeafNode,
	root mssmt.Node) (bool, *mssmt.Proof, error) {

	var compressed mssmt.CompressedProof
	if err := compressed.Decode(bytes.NewReader(raw)); err != nil {
		return false, nil, err
	}
	proof, err := compressed.Decompress()
	if err != nil {
		return false, nil, err
	}
	return mssmt.VerifyMerkleProof(key, leaf, proof, root), proof, nil
}

func runCheck(args []string) error {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	addr := fs.String("addr", "", "host:port of the universe server")
	truthPath := fs.String("truth", "", "the truth file of `gen`")
	pageSize := fs.Int("page", 5, "page size for AssetRoots and AssetLeafKeys")
	if err := fs.Parse(args); err != nil {
		return err
	}
	raw, err := os.ReadFile(*truthPath)
	if err != nil {
		return err
	}
	var truth Truth
	if err := json.Unmarshal(raw, &truth); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// The reference's trees for the truth: each universe, then the two
	// multiverse trees over their roots.
	byName := map[string]*expected{}
	multiverse := map[string]*mssmt.CompactedTree{
		"issuance": mssmt.NewCompactedTree(mssmt.NewDefaultStore()),
		"transfer": mssmt.NewCompactedTree(mssmt.NewDefaultStore()),
	}
	for _, t := range truth.Universes {
		e, err := buildExpected(ctx, t)
		if err != nil {
			return err
		}
		byName[e.name] = e
		if _, err := multiverse[t.ProofType].Insert(ctx, e.idBytes, e.multiverseLeaf()); err != nil {
			return err
		}
	}

	// tapd dials a federation server over TLS without checking its
	// certificate (universe_rpc_registrar.go: InsecureSkipVerify).
	creds := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})
	conn, err := grpc.NewClient(*addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	c := &checker{ctx: ctx, client: unirpc.NewUniverseClient(conn)}
	c.report.Mismatches = []string{}

	info, err := c.client.Info(ctx, &unirpc.InfoRequest{})
	if err != nil {
		return fmt.Errorf("Info: %w", err)
	}
	c.report.RuntimeID = info.RuntimeId

	// MultiverseRoot per proof type.
	multiverseRoots := map[string]*mssmt.BranchNode{}
	for name, tree := range multiverse {
		root, err := tree.Root(ctx)
		if err != nil {
			return err
		}
		multiverseRoots[name] = root
		pt := unirpc.ProofType_PROOF_TYPE_ISSUANCE
		if name == "transfer" {
			pt = unirpc.ProofType_PROOF_TYPE_TRANSFER
		}
		resp, err := c.client.MultiverseRoot(ctx, &unirpc.MultiverseRootRequest{ProofType: pt})
		if err != nil {
			return fmt.Errorf("MultiverseRoot %s: %w", name, err)
		}
		if !sameNode(resp.MultiverseRoot, root) {
			c.fail("multiverse %s root: got %x/%d, the reference %x/%d", name,
				resp.MultiverseRoot.GetRootHash(), uint64(resp.MultiverseRoot.GetRootSum()),
				root.NodeHash(), root.NodeSum())
		}
		c.report.MultiverseRoots++
	}

	// AssetRoots, paged as tapd's syncer pages it (offset += limit until
	// an empty page), both directions.
	for _, dir := range []taprpc.SortDirection{taprpc.SortDirection_SORT_DIRECTION_ASC, taprpc.SortDirection_SORT_DIRECTION_DESC} {
		seen := map[string]bool{}
		for offset := 0; ; offset += *pageSize {
			resp, err := c.client.AssetRoots(ctx, &unirpc.AssetRootRequest{
				WithAmountsById: true,
				Offset:          int32(offset),
				Limit:           int32(*pageSize),
				Direction:       dir,
			})
			if err != nil {
				return fmt.Errorf("AssetRoots: %w", err)
			}
			c.report.RootPages++
			if len(resp.UniverseRoots) == 0 {
				break
			}
			if len(resp.UniverseRoots) > *pageSize {
				c.fail("AssetRoots page of %d roots, limit %d", len(resp.UniverseRoots), *pageSize)
			}
			for name, root := range resp.UniverseRoots {
				e, ok := byName[name]
				if !ok {
					c.fail("AssetRoots lists %s, which the truth lacks", name)
					continue
				}
				if seen[name] {
					c.fail("AssetRoots lists %s twice (direction %v)", name, dir)
				}
				seen[name] = true
				if !sameNode(root.MssmtRoot, e.root) {
					c.fail("AssetRoots %s: root differs from the reference's", name)
				}
				c.checkAmounts(e, root)
			}
		}
		if len(seen) != len(byName) {
			c.fail("AssetRoots (direction %v) listed %d universes, the truth has %d", dir, len(seen), len(byName))
		}
	}

	names := make([]string, 0, len(byName))
	for name := range byName {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		c.checkUniverse(byName[name], multiverseRoots[byName[name].truth.ProofType],
			multiverse[byName[name].truth.ProofType], *pageSize)
	}

	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", " ")
	if err := out.Encode(c.report); err != nil {
		return err
	}
	if len(c.report.Mismatches) > 0 {
		return fmt.Errorf("%d mismatches", len(c.report.Mismatches))
	}
	return nil
}

// checkAmounts: for an issuance universe, amounts_by_asset_id holds each
// asset's total (tapd: the sum of its leaves' amounts).
func (c *checker) checkAmounts(e *expected, root *unirpc.UniverseRoot) {
	if e.truth.ProofType != "issuance" {
		return
	}
	want := map[string]uint64{}
	for _, l := range e.truth.Leaves {
		a, _ := strconv.ParseUint(l.Amount, 10, 64)
		want[l.AssetID] += a
	}
	if len(want) != len(root.AmountsByAssetId) {
		c.fail("%s amounts_by_asset_id: %d assets, the truth has %d", e.name, len(root.AmountsByAssetId), len(want))
		return
	}
	for id, amount := range want {
		if root.AmountsByAssetId[id] != amount {
			c.fail("%s amounts_by_asset_id[%s] = %d, want %d", e.name, id, root.AmountsByAssetId[id], amount)
		}
	}
}

func (c *checker) checkUniverse(e *expected, multiverseRoot *mssmt.BranchNode,
	multiverseTree *mssmt.CompactedTree, pageSize int) {

	id := e.rpcID()
	ctx := c.ctx
	c.report.Universes++

	// QueryAssetRoots: tapd's RootNode.
	q, err := c.client.QueryAssetRoots(ctx, &unirpc.AssetRootQuery{Id: id})
	if err != nil {
		c.fail("%s QueryAssetRoots: %v", e.name, err)
		return
	}
	served := q.IssuanceRoot
	if e.truth.ProofType == "transfer" {
		served = q.TransferRoot
	}
	if served == nil || !sameNode(served.MssmtRoot, e.root) {
		c.fail("%s QueryAssetRoots: root differs from the reference's", e.name)
	}

	// AssetLeafKeys: every key once, each entry's leaf_node_hash the
	// reference's NewLeafNode(value, sum).NodeHash(), the deprecated
	// asset_keys the same keys.
	keys := map[[32]byte]bool{}
	for offset := 0; ; offset += pageSize {
		page, err := c.client.AssetLeafKeys(ctx, &unirpc.AssetLeafKeysRequest{
			Id: id, Offset: int32(offset), Limit: int32(pageSize),
			// tapd's syncer sends the zero value.
			Direction: taprpc.SortDirection_SORT_DIRECTION_DESC,
		})
		if err != nil {
			c.fail("%s AssetLeafKeys: %v", e.name, err)
			return
		}
		if len(page.Entries) == 0 {
			break
		}
		//nolint:staticcheck // the deprecated field older readers use.
		if len(page.AssetKeys) != len(page.Entries) {
			c.fail("%s AssetLeafKeys: %d asset_keys beside %d entries", e.name, len(page.AssetKeys), len(page.Entries))
		}
		for i, entry := range page.Entries {
			key, err := parseLeafKey(entry.AssetKey)
			if err != nil {
				c.fail("%s AssetLeafKeys entry: %v", e.name, err)
				continue
			}
			//nolint:staticcheck
			if i < len(page.AssetKeys) {
				legacy, err := parseLeafKey(page.AssetKeys[i])
				if err != nil || legacy != key {
					c.fail("%s asset_keys[%d] is not entries[%d]", e.name, i, i)
				}
			}
			if keys[key] {
				c.fail("%s AssetLeafKeys lists %x twice", e.name, key)
			}
			keys[key] = true
			c.report.LeafKeys++
			leaf, ok := e.leaves[key]
			if !ok {
				c.fail("%s AssetLeafKeys lists %x, which the truth lacks", e.name, key)
				continue
			}
			hash := leaf.NodeHash()
			if !bytes.Equal(entry.LeafNodeHash, hash[:]) {
				c.fail("%s leaf %x: leaf_node_hash %x, the reference %x", e.name, key, entry.LeafNodeHash, hash)
			}
			c.report.LeafHashes++
		}
	}
	if len(keys) != len(e.leaves) {
		c.fail("%s AssetLeafKeys listed %d keys, the truth has %d", e.name, len(keys), len(e.leaves))
	}

	// AssetLeaves: the proof bytes of every leaf.
	values := map[string]int{}
	for _, l := range e.truth.Leaves {
		values[l.Proof]++
	}
	for offset := 0; ; offset += pageSize {
		page, err := c.client.AssetLeaves(ctx, &unirpc.AssetLeavesRequest{
			Id: id, Offset: int32(offset), Limit: int32(pageSize),
		})
		if err != nil {
			c.fail("%s AssetLeaves: %v", e.name, err)
			return
		}
		if len(page.Leaves) == 0 {
			break
		}
		for _, l := range page.Leaves {
			v := hex.EncodeToString(l.Proof)
			if values[v] == 0 {
				c.fail("%s AssetLeaves: a leaf the truth lacks", e.name)
			}
			values[v]--
			c.report.Leaves++
		}
	}
	for _, n := range values {
		if n != 0 {
			c.fail("%s AssetLeaves: the leaves served differ from the truth's", e.name)
			break
		}
	}

	// QueryProof for every key, as tapd's FetchProofLeaf.
	uniKeys := make([][32]byte, 0, len(e.leafKeys))
	for k := range e.leafKeys {
		uniKeys = append(uniKeys, k)
	}
	sort.Slice(uniKeys, func(i, j int) bool { return bytes.Compare(uniKeys[i][:], uniKeys[j][:]) < 0 })
	multiverseProof, err := multiverseTree.MerkleProof(ctx, e.idBytes)
	if err != nil {
		c.fail("reference multiverse proof: %v", err)
		return
	}
	for _, key := range uniKeys {
		l := e.leafKeys[key]
		resp, err := c.client.QueryProof(ctx, &unirpc.UniverseKey{
			Id: id,
			LeafKey: &unirpc.AssetKey{
				Outpoint:  &unirpc.AssetKey_OpStr{OpStr: fmt.Sprintf("%x:%d", reverse(mustHex(l.Txid)), l.Index)},
				ScriptKey: &unirpc.AssetKey_ScriptKeyBytes{ScriptKeyBytes: mustHex(l.ScriptKey)},
			},
		})
		if err != nil {
			c.fail("%s QueryProof %x: %v", e.name, key, err)
			continue
		}
		leaf := e.leaves[key]
		if resp.AssetLeaf == nil || !bytes.Equal(resp.AssetLeaf.Proof, leaf.Value) {
			c.fail("%s QueryProof %x: asset_leaf.proof differs", e.name, key)
		}
		if resp.UniverseRoot == nil || !sameNode(resp.UniverseRoot.MssmtRoot, e.root) {
			c.fail("%s QueryProof %x: universe_root differs", e.name, key)
		}
		ok, _, err := verifyCompressed(resp.UniverseInclusionProof, key, leaf, e.root)
		if err != nil || !ok {
			c.fail("%s QueryProof %x: the universe inclusion proof does not verify (%v)", e.name, key, err)
		}
		want, err := e.tree.MerkleProof(ctx, key)
		if err != nil || !bytes.Equal(resp.UniverseInclusionProof, encodeProof(want)) {
			c.fail("%s QueryProof %x: the proof's bytes differ from the reference tree's", e.name, key)
		}
		c.report.Proofs++

		if !sameNode(resp.MultiverseRoot, multiverseRoot) {
			c.fail("%s QueryProof %x: multiverse_root differs", e.name, key)
		}
		ok, _, err = verifyCompressed(resp.MultiverseInclusionProof, e.idBytes, e.multiverseLeaf(), multiverseRoot)
		if err != nil || !ok {
			c.fail("%s QueryProof %x: the multiverse inclusion proof does not verify (%v)", e.name, key, err)
		}
		if !bytes.Equal(resp.MultiverseInclusionProof, encodeProof(multiverseProof)) {
			c.fail("%s QueryProof %x: the multiverse proof's bytes differ from the reference tree's", e.name, key)
		}
		c.report.MultiverseProofs++
	}
}
