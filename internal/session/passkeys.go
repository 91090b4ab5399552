package session

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// Outcomes of the passkey ceremonies a caller branches on.
var (
	// ErrPasskeyFailed: the authenticator's answer does not verify
	// (signature, origin, relying party, user verification), names no
	// passkey of ours, or counts its signatures backwards (a cloned
	// authenticator).
	ErrPasskeyFailed = errors.New("session: passkey refused")
	// ErrChallengeExpired: the answer's challenge is not one this service
	// has open: never issued (or tampered with), used already, or older
	// than ChallengeTTL.
	ErrChallengeExpired = errors.New("session: passkey challenge expired or already used")
)

// ChallengeTTL is how long a ceremony's challenge waits for its answer:
// time for a person to touch the authenticator, short enough that a
// challenge is not worth collecting.
const ChallengeTTL = 2 * time.Minute

// ChallengeStore keeps the registrations' open challenges and the
// sign-ins' used ones, shared by every instance: an answer may reach
// another instance than its challenge came from.
type ChallengeStore interface {
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	GetDel(ctx context.Context, key string) *redis.StringCmd
}

// PasskeyOptions configure Passkeys.
type PasskeyOptions struct {
	// RPID is the relying party's id: the site's domain, "localhost" on
	// one machine. Required.
	RPID string
	// Origins are the pages' origins (scheme://host[:port]) whose
	// ceremonies are taken. Required.
	Origins []string
	// Desk opens the sessions; its keys' secret signs the sign-in
	// challenges (a key derived from it) and its clock dates them.
	// Required.
	Desk  *Desk
	DB    *gorm.DB
	Redis ChallengeStore
}

// Passkeys registers WebAuthn credentials to accounts and signs buyers in
// with them (github.com/go-webauthn/webauthn): a second credential beside
// the password, whose session is the password's kind (Desk's tokens,
// ended by signing out or changing the password alike).
type Passkeys struct {
	rp         *webauthn.WebAuthn
	desk       *Desk
	db         *gorm.DB
	rdb        ChallengeStore
	challenges challenges
}

// passkeyRow is a row of the passkeys table: a credential and whose it is.
type passkeyRow struct {
	CredentialID []byte `gorm:"column:credential_id;primaryKey;type:varbinary(1023)"`
	Buyer        int64  `gorm:"not null;index"`
	PublicKey    []byte `gorm:"not null"` // COSE_Key, as the authenticator sent it
	// SignCount is the authenticator's signature counter at its last use:
	// an assertion must count past it (or both stay 0, an authenticator
	// that does not count).
	SignCount int64 `gorm:"not null;default:0"`
	// Flags are the registration's authenticator flags: backup
	// eligibility must not change from one use to the next.
	Flags     uint8 `gorm:"not null;default:0"`
	CreatedAt time.Time
}

func (passkeyRow) TableName() string { return "passkeys" }

// NewPasskeys builds Passkeys from opt.
func NewPasskeys(opt PasskeyOptions) (*Passkeys, error) {
	timeout := webauthn.TimeoutConfig{Enforce: true, Timeout: ChallengeTTL, TimeoutUVD: ChallengeTTL}
	rp, err := webauthn.New(&webauthn.Config{
		RPID: opt.RPID, RPDisplayName: "seckill", RPOrigins: opt.Origins,
		Timeouts: webauthn.TimeoutsConfig{Login: timeout, Registration: timeout},
	})
	if err != nil {
		return nil, fmt.Errorf("passkeys: %w", err)
	}
	return &Passkeys{rp: rp, desk: opt.Desk, db: opt.DB, rdb: opt.Redis, challenges: newChallenges(opt.Desk.keys, opt.Desk.now)}, nil
}

// passkeyUser is an account as the WebAuthn library sees it.
type passkeyUser struct {
	id    int64
	name  string
	creds []webauthn.Credential
}

func (u passkeyUser) WebAuthnID() []byte                         { return userHandle(u.id) }
func (u passkeyUser) WebAuthnName() string                       { return u.name }
func (u passkeyUser) WebAuthnDisplayName() string                { return u.name }
func (u passkeyUser) WebAuthnCredentials() []webauthn.Credential { return u.creds }

// userHandle is the buyer id as the authenticator keeps it: 8 bytes. The
// id is random already (Accounts), so it tells nothing a handle should not.
func userHandle(buyer int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(buyer)) }

func (r passkeyRow) credential() webauthn.Credential {
	return webauthn.Credential{ID: r.CredentialID, PublicKey: r.PublicKey, Flags: webauthn.CredentialFlagsFromMsgpByte(r.Flags),
		Authenticator: webauthn.Authenticator{SignCount: uint32(r.SignCount)}}
}

// BeginRegistration opens a registration for the buyer of token: the
// options for navigator.credentials.create, asking for a discoverable
// credential (signed in with, no name typed) and user verification.
func (p *Passkeys) BeginRegistration(ctx context.Context, token string) (*protocol.CredentialCreation, error) {
	u, err := p.user(ctx, token)
	if err != nil {
		return nil, err
	}
	exclude := make([]protocol.CredentialDescriptor, len(u.creds))
	for i, c := range u.creds {
		exclude[i] = c.Descriptor()
	}
	opts, sd, err := p.rp.BeginRegistration(u,
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, RequireResidentKey: protocol.ResidentKeyRequired(),
			UserVerification: protocol.VerificationRequired,
		}),
		webauthn.WithExclusions(exclude))
	if err != nil {
		return nil, fmt.Errorf("beginning a passkey registration: %w", err)
	}
	return opts, p.open(ctx, protocol.CreateCeremony, sd)
}

// FinishRegistration verifies the authenticator's attestation (body, the
// PublicKeyCredential as JSON) against its challenge, which it uses up,
// and keeps the credential for the buyer of token.
func (p *Passkeys) FinishRegistration(ctx context.Context, token string, body []byte) error {
	u, err := p.user(ctx, token)
	if err != nil {
		return err
	}
	parsed, err := protocol.ParseCredentialCreationResponseBytes(body)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPasskeyFailed, err)
	}
	sd, err := p.take(ctx, protocol.CreateCeremony, parsed.Response.CollectedClientData.Challenge)
	if err != nil {
		return err
	}
	cred, err := p.rp.CreateCredential(u, sd, parsed)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrPasskeyFailed, err)
	}
	row := passkeyRow{CredentialID: cred.ID, Buyer: u.id, PublicKey: cred.PublicKey,
		SignCount: int64(cred.Authenticator.SignCount), Flags: cred.Flags.MsgpByte()}
	res := p.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&row)
	switch {
	case res.Error != nil:
		return fmt.Errorf("keeping a passkey: %w", res.Error)
	case res.RowsAffected == 0:
		return fmt.Errorf("%w: this credential is registered already", ErrPasskeyFailed)
	}
	return nil
}

// BeginSignIn opens a sign-in: the options for navigator.credentials.get,
// with no credentials named, so that the authenticator offers the
// discoverable ones it holds for this site. It stores nothing: the
// challenge is signed (challenges), and anyone may ask for one.
func (p *Passkeys) BeginSignIn(context.Context) (*protocol.CredentialAssertion, error) {
	opts, _, err := p.signIn(p.challenges.mint())
	return opts, err
}

// signIn is a sign-in's options and session data for challenge: the same
// at begin and at finish, where the session data is made again.
func (p *Passkeys) signIn(challenge []byte) (*protocol.CredentialAssertion, *webauthn.SessionData, error) {
	opts, sd, err := p.rp.BeginDiscoverableLogin(webauthn.WithChallenge(challenge), webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		return nil, nil, fmt.Errorf("beginning a passkey sign-in: %w", err)
	}
	return opts, sd, nil
}

// FinishSignIn verifies the authenticator's assertion (body, the
// PublicKeyCredential as JSON) against its challenge, which must be one
// of ours and unexpired, uses the challenge up, moves the credential's
// signature counter forward, and opens a session for its account as a
// password sign-in does.
func (p *Passkeys) FinishSignIn(ctx context.Context, body []byte) (Token, error) {
	parsed, err := protocol.ParseCredentialRequestResponseBytes(body)
	if err != nil {
		return Token{}, fmt.Errorf("%w: %w", ErrPasskeyFailed, err)
	}
	challenge, err := base64.RawURLEncoding.DecodeString(parsed.Response.CollectedClientData.Challenge)
	if err != nil {
		return Token{}, fmt.Errorf("%w: the challenge is not base64url", ErrChallengeExpired)
	}
	expires, err := p.challenges.check(challenge)
	if err != nil {
		return Token{}, err
	}
	_, sd, err := p.signIn(challenge)
	if err != nil {
		return Token{}, err
	}
	sd.Expires = expires // the library's check of it, beside ours
	var (
		row    passkeyRow
		broken error // the database's failure, not the answer's: not a 401
	)
	find := func(rawID, _ []byte) (webauthn.User, error) {
		err := p.db.WithContext(ctx).Where("credential_id = ?", rawID).Take(&row).Error
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			return nil, errors.New("no passkey has this id")
		case err != nil:
			broken = fmt.Errorf("reading a passkey: %w", err)
			return nil, broken
		}
		return passkeyUser{id: row.Buyer, creds: []webauthn.Credential{row.credential()}}, nil
	}
	if _, err := p.rp.ValidateDiscoverableLogin(find, *sd, parsed); err != nil {
		if broken != nil {
			return Token{}, broken
		}
		return Token{}, fmt.Errorf("%w: %w", ErrPasskeyFailed, err)
	}
	if err := p.spend(ctx, challenge, expires); err != nil {
		return Token{}, err
	}
	if err := p.counted(ctx, row, parsed.Response.AuthenticatorData.Counter); err != nil {
		return Token{}, err
	}
	acct, err := p.desk.accounts.byID(ctx, row.Buyer)
	if err != nil {
		return Token{}, err
	}
	return p.desk.open(ctx, acct, acct.Name)
}

// counted moves the credential's signature counter to n, which must be
// past the stored one: an authenticator's counter only grows, so an
// assertion that does not count past the last means a copy of its key
// signs elsewhere (or a replay). Checked in the UPDATE itself, so that
// two instances taking assertions of one count at once let one through.
// An authenticator that keeps no counter sends 0 each time, and is let be.
func (p *Passkeys) counted(ctx context.Context, row passkeyRow, n uint32) error {
	if n == 0 && row.SignCount == 0 {
		return nil
	}
	res := p.db.WithContext(ctx).Model(&passkeyRow{}).Where("credential_id = ? AND sign_count < ?", row.CredentialID, int64(n)).
		Update("sign_count", int64(n))
	switch {
	case res.Error != nil:
		return fmt.Errorf("counting a passkey's use: %w", res.Error)
	case res.RowsAffected == 0:
		return fmt.Errorf("%w: the authenticator's signature count %d is not past %d (a cloned authenticator?)", ErrPasskeyFailed, n, row.SignCount)
	}
	return nil
}

// user is the account of token with its passkeys.
func (p *Passkeys) user(ctx context.Context, token string) (passkeyUser, error) {
	b, err := p.desk.Verify(ctx, token)
	if err != nil {
		return passkeyUser{}, err
	}
	acct, err := p.desk.accounts.byID(ctx, b.ID)
	if err != nil {
		return passkeyUser{}, err
	}
	if acct.Password == "" {
		return passkeyUser{}, fmt.Errorf("%w: only an account with a password can add a passkey (a demo account is anyone's)", ErrPasskeyFailed)
	}
	var rows []passkeyRow
	if err := p.db.WithContext(ctx).Where("buyer = ?", b.ID).Find(&rows).Error; err != nil {
		return passkeyUser{}, fmt.Errorf("reading the passkeys of an account: %w", err)
	}
	u := passkeyUser{id: b.ID, name: acct.Name}
	for _, r := range rows {
		u.creds = append(u.creds, r.credential())
	}
	return u, nil
}

// spend uses a verified sign-in's challenge up, on every instance, in one
// round trip (SET NX): of two answers to one challenge, one finds it
// unused. The mark lives as long as the challenge could still be taken
// (with a second for clocks that disagree), so only a verified assertion
// writes to Redis, never a begin.
func (p *Passkeys) spend(ctx context.Context, challenge []byte, expires time.Time) error {
	key := challengeKey(protocol.AssertCeremony, "used:"+base64.RawURLEncoding.EncodeToString(challenge))
	ttl := max(expires.Sub(p.desk.now()), 0) + leeway // never 0: no expiry at all
	fresh, err := p.rdb.SetNX(ctx, key, 1, ttl).Result()
	switch {
	case err != nil:
		return fmt.Errorf("using a passkey challenge up: %w", err)
	case !fresh:
		return fmt.Errorf("%w: used already", ErrChallengeExpired)
	}
	return nil
}

// open keeps a registration's session data under its challenge for
// ChallengeTTL.
func (p *Passkeys) open(ctx context.Context, kind protocol.CeremonyType, sd *webauthn.SessionData) error {
	data, err := json.Marshal(sd)
	if err != nil {
		return fmt.Errorf("encoding a passkey challenge: %w", err)
	}
	if err := p.rdb.Set(ctx, challengeKey(kind, sd.Challenge), data, ChallengeTTL).Err(); err != nil {
		return fmt.Errorf("keeping a passkey challenge: %w", err)
	}
	return nil
}

// take uses up the registration challenge an answer names, in one round
// trip (GETDEL): of two answers to one challenge, on any instances, one
// finds it.
func (p *Passkeys) take(ctx context.Context, kind protocol.CeremonyType, challenge string) (webauthn.SessionData, error) {
	var sd webauthn.SessionData
	data, err := p.rdb.GetDel(ctx, challengeKey(kind, challenge)).Bytes()
	switch {
	case errors.Is(err, redis.Nil):
		return sd, ErrChallengeExpired
	case err != nil:
		return sd, fmt.Errorf("taking a passkey challenge: %w", err)
	}
	if err := json.Unmarshal(data, &sd); err != nil {
		return sd, fmt.Errorf("decoding a passkey challenge: %w", err)
	}
	return sd, nil
}

// challengeKey is where an open challenge waits, by ceremony: a sign-in's
// challenge is no registration's.
func challengeKey(kind protocol.CeremonyType, challenge string) string {
	return "seckill:passkey:" + string(kind) + ":" + challenge
}
