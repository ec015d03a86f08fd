// The walk over a DICOM file's element lengths before DCMTK reads it (see
// dicom_lengths.h). Only tags, VRs, lengths and delimiters are read here,
// each as DCMTK 3.6.7 reads them (dcitem.cc, dcmetinf.cc, dcvr.cc), since a
// walk that reads an element otherwise loses step with DCMTK and never sees
// the lengths DCMTK then allocates:
//   - the meta group: from byte 132, explicit VR little endian, up to its
//     group length (0002,0000), which must come first (DCMTK otherwise
//     guesses where it ends); its first transfer syntax (0002,0010) must be
//     one DCMTK knows, since DCMTK otherwise guesses the data set's encoding
//     from its first bytes (dicom_oom_2.6GB.dcm: a group length of 0 hid the
//     transfer syntax, DCMTK read the data set as big endian, 2.6 GB);
//   - explicit VR: every VR DCMTK does not know and that is not two capital
//     letters has a 2-byte length (DCMTK's EVR_UNKNOWN2B); an unknown one of
//     capital letters a 4-byte one, which must fit read either way;
//   - (FFFE,E000) items and the (FFFE,E00D) / (FFFE,E0DD) delimiters have
//     no VR; other (FFFE,xxxx) tags are elements;
//   - an undefined length: pixel data fragments under OB and OW (and
//     implicit VR), a sequence of items otherwise, whose items DCMTK reads
//     as implicit VR little endian under UN or an unknown VR (CP-246);
//   - a defined length: the items of an explicit SQ; in an implicit VR data
//     set DCMTK's dictionary says which elements are sequences, so every
//     value that starts with an item tag is walked as a sequence (a value
//     that only looks like one and whose inner lengths do not fit is
//     refused: none of the test files does).
// Deflated data sets, whose lengths lie inside their zlib stream, are
// refused.
#include "decode/dicom_lengths.h"

#include <string.h>

#include "decode/dicom_dcmtk.h"

#define DICOM_META_START 132  // the 128-byte preamble and "DICM"
#define DICOM_MAX_NESTING 16
#define DICOM_UNDEFINED_LENGTH 0xFFFFFFFFu

typedef struct DicomSyntax {
    int big_endian;
    int implicit;
} DicomSyntax;

static const DicomSyntax META_SYNTAX = {0, 0};         // explicit VR little endian
static const DicomSyntax UN_SEQUENCE_SYNTAX = {0, 1};  // CP-246: implicit VR little endian

// One element's tag, VR and length as DCMTK reads them.
typedef struct DicomElement {
    uint32_t group, element, length;
    size_t header;  // bytes before the value
    char vr[3];     // "" when implicit, or an item or delimiter
    int item;       // (FFFE,E000)
    int delimiter;  // (FFFE,E00D) or (FFFE,E0DD)
} DicomElement;

static uint32_t dicom_u16(const uint8_t *p, int big_endian) {
    return big_endian ? (uint32_t)p[0] << 8 | p[1] : (uint32_t)p[1] << 8 | p[0];
}

static uint32_t dicom_u32(const uint8_t *p, int big_endian) {
    return big_endian ? dicom_u16(p, 1) << 16 | dicom_u16(p + 2, 1)
                      : dicom_u16(p + 2, 0) << 16 | dicom_u16(p, 0);
}

// Value representations: 2 with a 2-byte length, 1 with a 4-byte length
// after 2 reserved bytes, 0 for a VR the standard does not have.
static int vr_kind(const char *vr) {
    static const char *const short_names[] = {"AE", "AS", "AT", "CS", "DA", "DS", "DT",
                                              "FD", "FL", "IS", "LO", "LT", "PN", "SH",
                                              "SL", "SS", "ST", "TM", "UI", "UL", "US"};
    static const char *const long_names[] = {"OB", "OD", "OF", "OL", "OV", "OW", "SQ",
                                             "SV", "UC", "UN", "UR", "UT", "UV"};
    for (size_t i = 0; i < sizeof short_names / sizeof short_names[0]; i++)
        if (memcmp(vr, short_names[i], 2) == 0) return 2;
    for (size_t i = 0; i < sizeof long_names / sizeof long_names[0]; i++)
        if (memcmp(vr, long_names[i], 2) == 0) return 1;
    return 0;
}

static int is_capital(uint8_t c) { return c >= 'A' && c <= 'Z'; }

// The element at p (left bytes to the end of what holds it); -1 when its
// header does not fit.
static int read_element(const uint8_t *p, size_t left, DicomSyntax syntax, DicomElement *e) {
    if (left < 8) return -1;
    const int big = syntax.big_endian;
    memset(e, 0, sizeof *e);
    e->group = dicom_u16(p, big);
    e->element = dicom_u16(p + 2, big);
    e->header = 8;
    if (e->group == 0xFFFE &&
        (e->element == 0xE000 || e->element == 0xE00D || e->element == 0xE0DD)) {
        e->item = e->element == 0xE000;
        e->delimiter = !e->item;
        e->length = dicom_u32(p + 4, big);
        return 0;
    }
    if (syntax.implicit) {
        e->length = dicom_u32(p + 4, big);
        return 0;
    }
    memcpy(e->vr, p + 4, 2);
    const int kind = vr_kind(e->vr);
    if (kind == 2 || (kind == 0 && !(is_capital(p[4]) && is_capital(p[5])))) {
        e->length = dicom_u16(p + 6, big);
        return 0;
    }
    if (left < 12) return -1;
    e->header = 12;
    e->length = dicom_u32(p + 8, big);
    // An unknown VR of capital letters: its implicit reading (the 4 bytes
    // after the tag) must fit too, in case DCMTK is set to read it so.
    return kind == 0 && dicom_u32(p + 4, big) > left - 8 ? -1 : 0;
}

static int vr_is(const DicomElement *e, const char *name) { return memcmp(e->vr, name, 2) == 0; }

// Walks elements from `at` to `end` in `syntax` (or, for undefined-length
// containers, to their delimiter: *stop then receives where it ends).
// fragments: the items hold encapsulated pixel data, not elements. Returns
// 0 when all lengths fit.
static int walk_elements(const uint8_t *data, size_t at, size_t end, int depth, int fragments,
                         DicomSyntax syntax, size_t *stop) {
    if (depth > DICOM_MAX_NESTING) return -1;
    while (at < end) {
        DicomElement e;
        if (read_element(data + at, end - at, syntax, &e) != 0) return -1;
        if (e.delimiter) {
            if (stop) *stop = at + 8;
            return stop ? 0 : -1;
        }
        at += e.header;
        const int unknown = e.vr[0] && (vr_kind(e.vr) == 0 || vr_is(&e, "UN"));
        if (e.length == DICOM_UNDEFINED_LENGTH) {
            const int pixel_data = e.group == 0x7FE0 && e.element == 0x0010 &&
                                   (!e.vr[0] || vr_is(&e, "OB") || vr_is(&e, "OW"));
            size_t after = end;
            if (walk_elements(data, at, end, depth + 1, pixel_data,
                              unknown ? UN_SEQUENCE_SYNTAX : syntax, &after) != 0)
                return -1;
            at = after;
            continue;
        }
        if (e.length > end - at) return -1;
        const uint8_t *value = data + at;
        const int big = syntax.big_endian;
        const int starts_with_item = e.length >= 8 && dicom_u16(value, big) == 0xFFFE &&
                                     dicom_u16(value + 2, big) == 0xE000;
        const int nested = (e.item && !fragments) || vr_is(&e, "SQ") ||
                           (syntax.implicit && !e.item && starts_with_item);
        if (nested && walk_elements(data, at, at + e.length, depth + 1, 0, syntax, NULL) != 0)
            return -1;
        at += e.length;
    }
    return stop ? -1 : 0;  // an undefined length needs its delimiter
}

// The meta group (see the top of the file): *data_set gets where the data
// set starts, *syntax its encoding.
static int walk_meta(const uint8_t *data, size_t size, size_t *data_set, DicomSyntax *syntax,
                     ErrorMessage *err) {
    size_t at = DICOM_META_START;
    DicomElement e;
    if (read_element(data + at, size - at, META_SYNTAX, &e) != 0 || e.group != 0x0002 ||
        e.element != 0x0000 || !vr_is(&e, "UL") || e.length != 4 || size - at < 12)
        return error_set(err, "corrupt data: DICOM meta information that does not start with "
                              "its group length (0002,0000)");
    const size_t meta_end = at + 12 + dicom_u32(data + at + 8, 0);
    int found = 0, deflated = 0;
    char uid[65] = "";
    while (at < meta_end && at < size) {
        if (read_element(data + at, size - at, META_SYNTAX, &e) != 0 ||
            (e.length != DICOM_UNDEFINED_LENGTH && e.length > size - at - e.header))
            return error_set(err, "truncated: DICOM element longer than the data that holds it");
        if (e.length == DICOM_UNDEFINED_LENGTH || e.item || e.delimiter || vr_is(&e, "SQ"))
            return error_set(err, "corrupt data: DICOM meta information holding a sequence");
        if (!found && e.group == 0x0002 && e.element == 0x0010) {
            const size_t length = e.length < sizeof uid - 1 ? e.length : sizeof uid - 1;
            memcpy(uid, data + at + e.header, length);  // read as a C string: to its first NUL
            if (dicom_transfer_syntax(uid, &syntax->big_endian, &syntax->implicit, &deflated))
                return error_set(err, "unsupported format: DICOM transfer syntax \"%.64s\" (not "
                                      "one DCMTK knows)", uid);
            found = 1;
        }
        at += e.header + e.length;
    }
    if (!found)
        return error_set(err, "corrupt data: DICOM meta information without a transfer syntax "
                              "(0002,0010)");
    // A deflated data set's lengths lie inside its zlib stream, where this
    // walk does not look, and DCMTK allocates them as declared (fuzzing: 3 GB
    // from a few hundred bytes of stored deflate blocks).
    if (deflated)
        return error_set(err, "unsupported format: DICOM with a deflated data set (transfer "
                              "syntax %s)", uid);
    *data_set = at;
    return 0;
}

int dicom_check_lengths(const uint8_t *data, size_t size, ErrorMessage *err) {
    if (size < DICOM_META_START)
        return error_set(err, "truncated: DICOM file of %zu bytes", size);
    size_t data_set = 0;
    DicomSyntax syntax;
    if (walk_meta(data, size, &data_set, &syntax, err) != 0) return -1;
    if (walk_elements(data, data_set, size, 0, 0, syntax, NULL) != 0)
        return error_set(err, "truncated: DICOM element longer than the data that holds it");
    return 0;
}
