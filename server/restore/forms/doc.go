// Package forms learns what the switch made of the entries canon keeps in
// part as the controller sent them (canon.Opaque), right after flowstate
// installed them, so that such an entry compares equal to the switch
// afterwards and is not resent at every replay (Learn). The forms live in a
// canon.Forms shared by the replay and the writes, and are persisted through
// a Store so they survive restarts.
package forms
